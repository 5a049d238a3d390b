// Package reclaimback holds the integration tests of reclaim-back: the real local control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK, Karpenter with its KWOK
// provider), the AWS emulator's Spot placement scores through the production EC2 client, and
// lifeboat-controller's controllers in-process through the production wiring
// (controllers.Register).
package reclaimback

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback"
	"github.com/lifeboat-k8s/lifeboat/pkg/controllers/reclaimback/reclaimplan"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

const (
	zone   = "us-east-1a"
	zoneID = "use1-az1" // awsemu.ZoneID(zone); Karpenter's AWS provider labels nodes with it
)

// nodePoolYAML is the NodePool "default": one zone, with the zone-ID label Karpenter's AWS
// provider would set (the KWOK provider does not), so the probe knows which zone to score.
// Its budget forbids Karpenter's own disruption (drift, consolidation), so every change of a
// node in these tests is reclaim-back's.
func nodePoolYAML(name string, weight int, capacityTypes string, budget string) string {
	return localcluster.NodePool{Name: name, Weight: weight, CapacityTypes: strings.Split(capacityTypes, ","),
		Labels: map[string]string{reclaimplan.LabelZoneID: zoneID}, Zones: []string{zone},
		ConsolidateAfter: 5 * time.Second, DisruptionBudget: budget}.YAML()
}

type env struct {
	t       *testing.T
	cluster *localcluster.Cluster
	client  client.Client
	emu     *awsemu.Server
	opts    awsclient.Options
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no control plane (make test-unit); reclaim-back's integration tests need one")
	}
	var types []localcluster.InstanceType
	for _, it := range localcluster.DefaultInstanceTypes() {
		if it.Name != "c5.large" && it.Name != "m5.large" && it.Name != "m6i.large" {
			continue
		}
		var offers []localcluster.Offering
		for _, o := range it.Offerings {
			if o.Zone == zone {
				offers = append(offers, o)
			}
		}
		it.Offerings = offers
		types = append(types, it)
	}
	c := localclustertest.StartT(t, localcluster.Options{
		Karpenter: true, InstanceTypes: types,
		// The Pods start first On-Demand: the NodePool allows only that until the test relaxes it.
		NodePools:                  []string{nodePoolYAML("default", 1, "on-demand", "0")},
		KarpenterRegistrationDelay: time.Second,
	})
	ctx := context.Background()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := localcluster.ApplyCRDDirs(ctx, c, []string{filepath.Join(root, "manifests", "crds")}); err != nil {
		t.Fatalf("apply Lifeboat's CRDs: %v", err)
	}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	emu := awsemutest.StartT(t, awsemu.Options{Seed: 7})
	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	opts := emu.ClientOptions()
	opts.BaseDelay, opts.ThrottleBaseDelay, opts.MaxBackoff = 5*time.Millisecond, 10*time.Millisecond, 200*time.Millisecond
	return &env{t: t, cluster: c, client: cl, emu: emu, opts: opts}
}

// manager runs lifeboat-controller's controllers until stop (a crash, for the restart test).
type manager struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (e *env) startManager() *manager {
	e.t.Helper()
	cfg := e.cluster.RESTConfig()
	cfg.QPS, cfg.Burst = 200, 400
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: controllers.Scheme(), Cache: controllers.CacheOptions(""),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Logger:     klog.Background(),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clients, err := awsclient.New(ctx, e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := controllers.Register(ctx, mgr, controllers.Deps{
		Instances:       cloud.NewInstances(clients.EC2, cloud.InstancesOptions{}),
		PlacementScorer: cloud.NewPlacementScorer(clients.EC2, cloud.PlacementOptions{}),
		ReclaimBack:     reclaimback.Options{Poll: 300 * time.Millisecond, Idle: 2 * time.Second, Region: e.opts.Region},
		HandoffPoll:     200 * time.Millisecond,
	}); err != nil {
		e.t.Fatal(err)
	}
	m := &manager{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		if err := mgr.Start(ctx); err != nil {
			e.t.Errorf("manager: %v", err)
		}
	}()
	e.t.Cleanup(m.stop)
	return m
}

func (m *manager) stop() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
	})
}

// waitFor polls cond every 100 ms until it holds; on timeout it fails with the last description.
func (e *env) waitFor(what string, timeout time.Duration, cond func(ctx context.Context) (bool, string)) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := ""
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, desc := cond(ctx)
		if ctx.Err() == nil {
			last = desc
		}
		return ok, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}

func deploymentReady(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.ReadyReplicas == ptr.Deref(d.Spec.Replicas, 1) && d.Status.Replicas == ptr.Deref(d.Spec.Replicas, 1)
}

func TestMain(m *testing.M) {
	klog.SetOutput(os.Stderr)
	ctrl.SetLogger(klog.Background())
	os.Exit(m.Run())
}
