package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/assess"
)

var (
	nodePoolGVR = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	rolloutGVR  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}
)

type assessOptions struct {
	namespace    string // "" = all namespaces
	output       string
	pricesFile   string
	spotDiscount float64 // < 0: the table's
	warmPoolType string
	scenarioOut  string
	scale        float64
	now          func() time.Time
	stderr       io.Writer
}

func newAssessCommand(flags *genericclioptions.ConfigFlags) *cobra.Command {
	o := assessOptions{now: time.Now}
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "assess",
		Short: "Classify the cluster's workloads for Spot, price them, draw the savings curve, recommend a warm pool (read-only)",
		Long: `Read the cluster (one List per kind, nothing written) and report, per workload, its Spot-fit
class — ready, ready-with-changes, checkpoint-needed, poor-fit — with every reason and its fix,
the Lifeboat tier it would get and its monthly cost; the savings curve; Karpenter NodePools and
capacity pools, the correlated-reclaim exposure, and the warm pool size: auto would pick.
--scenario-out writes a simulation scenario of the fleet for lifeboat sim run.

Without -n it assesses all namespaces. The permissions it needs: manifests/assess/.
Classes, reasons, the cost model and the JSON schema: docs/ASSESS.md.`,
		Example: `  lifeboat assess
  lifeboat assess -n shop -o json
  lifeboat assess -o html > assess.html
  lifeboat assess --scenario-out fleet.yaml --scale 0.1 && lifeboat sim run --scenario fleet.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("namespace") {
				if allNamespaces {
					return fmt.Errorf("-n and --all-namespaces are exclusive")
				}
				ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
				if err != nil {
					return err
				}
				o.namespace = ns
			}
			cfg, err := flags.ToRESTConfig()
			if err != nil {
				return fmt.Errorf("kubeconfig: %w", err)
			}
			// Protobuf and a higher client-side rate: a handful of large Lists.
			cfg.ContentType = "application/vnd.kubernetes.protobuf"
			cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
			cfg.QPS, cfg.Burst = 50, 100
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			dcfg, err := flags.ToRESTConfig()
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(dcfg)
			if err != nil {
				return err
			}
			o.stderr = cmd.ErrOrStderr()
			return runAssess(cmd.Context(), cmd.OutOrStdout(), client, dyn, o)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "assess every namespace (the default without -n)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "table, json (stable schema, docs/ASSESS.md) or html (self-contained page with the savings curve)")
	cmd.Flags().StringVar(&o.pricesFile, "prices", "", "JSON price file laid over the embedded EC2 table (same schema: onDemandHourly, spotHourly, spotDiscount)")
	cmd.Flags().Float64Var(&o.spotDiscount, "spot-discount", -1, "assume Spot saves this fraction of On-Demand for every type, e.g. 0.7 (default: the price table's)")
	cmd.Flags().StringVar(&o.warmPoolType, "warm-pool-type", "", "warm pool instance type to size (default: the most common Spot node type)")
	cmd.Flags().StringVar(&o.scenarioOut, "scenario-out", "", "also write a simulation scenario of the fleet to this file (lifeboat sim run --scenario FILE)")
	cmd.Flags().Float64Var(&o.scale, "scale", 1, "with --scenario-out: multiply replicas and the burst by this factor (0 < scale ≤ 1) so a large fleet fits one machine")
	flags.AddFlags(cmd.Flags())
	return cmd
}

func runAssess(ctx context.Context, out io.Writer, client kubernetes.Interface, dyn dynamic.Interface, o assessOptions) error {
	switch o.output {
	case "table", "json", "html":
	default:
		return fmt.Errorf("-o %s: want table, json or html", o.output)
	}
	if o.scenarioOut != "" && (o.scale <= 0 || o.scale > 1) {
		return fmt.Errorf("--scale %g must be in (0, 1]", o.scale)
	}
	prices, err := assess.EmbeddedPrices()
	if err != nil {
		return err
	}
	if o.pricesFile != "" {
		if prices, err = assess.LoadPrices(prices, o.pricesFile); err != nil {
			return err
		}
	}
	if o.spotDiscount >= 0 {
		if prices, err = prices.WithSpotDiscount(o.spotDiscount); err != nil {
			return err
		}
	}
	snap, err := listSnapshot(ctx, client, dyn, o.namespace)
	if err != nil {
		return err
	}
	scope := "all namespaces"
	if o.namespace != "" {
		scope = "namespace " + o.namespace
	}
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	rep := assess.Assess(snap, assess.Options{Now: now(), Prices: prices, Scope: scope, WarmPoolType: o.warmPoolType})
	if o.scenarioOut != "" {
		_, data, err := rep.Scenario(assess.ScenarioOptions{Name: "assessed-fleet", Scale: o.scale})
		if err != nil {
			return fmt.Errorf("--scenario-out: %w", err)
		}
		if err := os.WriteFile(o.scenarioOut, data, 0o644); err != nil {
			return fmt.Errorf("--scenario-out: %w", err)
		}
		if o.stderr != nil {
			fmt.Fprintf(o.stderr, "scenario written to %s: lifeboat sim run --scenario %s\n", o.scenarioOut, o.scenarioOut)
		}
	}
	switch o.output {
	case "json":
		return rep.WriteJSON(out)
	case "html":
		return rep.WriteHTML(out)
	default:
		return rep.WriteTable(out)
	}
}

// listSnapshot lists each kind once, concurrently. A kind that cannot be listed is recorded
// (the report names it) unless it is a CRD that is not installed; only a failure to list Pods
// or Nodes, without which nothing can be judged, is an error.
func listSnapshot(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, ns string) (*assess.Snapshot, error) {
	l := &snapshotLister{ctx: ctx, client: client, ns: ns, s: &assess.Snapshot{ListErrors: map[string]string{}}}
	l.listCluster()
	l.listWorkloads()
	l.listStorage()
	l.listCRD("nodepools.karpenter.sh", dyn.Resource(nodePoolGVR), &l.s.NodePools)           // when Karpenter is installed
	l.listCRD("rollouts.argoproj.io", dyn.Resource(rolloutGVR).Namespace(ns), &l.s.Rollouts) // when Argo Rollouts is
	l.wg.Wait()
	if len(l.hard) > 0 {
		return nil, l.hard[0]
	}
	return l.s, nil
}

// snapshotLister runs the Lists of one snapshot, each in its goroutine, and collects their
// failures.
type snapshotLister struct {
	ctx    context.Context
	client kubernetes.Interface
	ns     string // "" = all namespaces
	s      *assess.Snapshot

	mu   sync.Mutex
	wg   sync.WaitGroup
	hard []error
}

// listAll lists everything: an unset resourceVersion is a consistent read, served from the watch
// cache since Kubernetes 1.31 (ConsistentListFromCache): fast and not stale.
var listAll = metav1.ListOptions{}

// run starts f. Its failure fails the snapshot if the kind is required, else it is recorded in
// ListErrors.
func (l *snapshotLister) run(kind string, required bool, f func() error) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if err := f(); err != nil {
			l.record(kind, err, required)
		}
	}()
}

func (l *snapshotLister) record(kind string, err error, required bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if required {
		l.hard = append(l.hard, fmt.Errorf("list %s: %w (the permissions assess needs: manifests/assess/)", kind, err))
		return
	}
	l.s.ListErrors[kind] = err.Error()
}

// listCluster lists the namespaces (only the assessed one with -n), the nodes and the Pods.
func (l *snapshotLister) listCluster() {
	ctx, client, ns, s := l.ctx, l.client, l.ns, l.s
	l.run("namespaces", false, func() error {
		opts := listAll
		if ns != "" {
			opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", ns).String()
		}
		list, err := client.CoreV1().Namespaces().List(ctx, opts)
		if err == nil {
			s.Namespaces = list.Items
		}
		return err
	})
	listKind(l, "nodes", true, client.CoreV1().Nodes().List, func(list *corev1.NodeList) { s.Nodes = list.Items })
	listKind(l, "pods", true, client.CoreV1().Pods(ns).List, func(list *corev1.PodList) { s.Pods = list.Items })
}

// listWorkloads lists the workload kinds and the PodDisruptionBudgets.
func (l *snapshotLister) listWorkloads() {
	client, ns, s := l.client, l.ns, l.s
	listKind(l, "deployments.apps", false, client.AppsV1().Deployments(ns).List, func(list *appsv1.DeploymentList) { s.Deployments = list.Items })
	listKind(l, "replicasets.apps", false, client.AppsV1().ReplicaSets(ns).List, func(list *appsv1.ReplicaSetList) { s.ReplicaSets = list.Items })
	listKind(l, "statefulsets.apps", false, client.AppsV1().StatefulSets(ns).List, func(list *appsv1.StatefulSetList) { s.StatefulSets = list.Items })
	listKind(l, "jobs.batch", false, client.BatchV1().Jobs(ns).List, func(list *batchv1.JobList) { s.Jobs = list.Items })
	listKind(l, "cronjobs.batch", false, client.BatchV1().CronJobs(ns).List, func(list *batchv1.CronJobList) { s.CronJobs = list.Items })
	listKind(l, "poddisruptionbudgets.policy", false, client.PolicyV1().PodDisruptionBudgets(ns).List, func(list *policyv1.PodDisruptionBudgetList) { s.PDBs = list.Items })
}

// listStorage lists the claims, volumes and StorageClasses that tell node-local data.
func (l *snapshotLister) listStorage() {
	client, ns, s := l.client, l.ns, l.s
	listKind(l, "persistentvolumeclaims", false, client.CoreV1().PersistentVolumeClaims(ns).List, func(list *corev1.PersistentVolumeClaimList) { s.PVCs = list.Items })
	listKind(l, "persistentvolumes", false, client.CoreV1().PersistentVolumes().List, func(list *corev1.PersistentVolumeList) { s.PVs = list.Items })
	listKind(l, "storageclasses.storage.k8s.io", false, client.StorageV1().StorageClasses().List, func(list *storagev1.StorageClassList) { s.StorageClasses = list.Items })
}

// listKind runs list as kind (see run); keep stores what it listed.
func listKind[L any](l *snapshotLister, kind string, required bool, list func(context.Context, metav1.ListOptions) (L, error), keep func(L)) {
	l.run(kind, required, func() error {
		got, err := list(l.ctx, listAll)
		if err == nil {
			keep(got)
		}
		return err
	})
}

// listCRD lists the objects of an optional CRD into dst; a CRD that is not installed is
// neither an error nor a list failure (the report's findings say what its absence means).
func (l *snapshotLister) listCRD(kind string, res dynamic.ResourceInterface, dst *[]unstructured.Unstructured) {
	l.run(kind, false, func() error {
		list, err := res.List(l.ctx, listAll)
		switch {
		case err == nil:
			*dst = list.Items
		case apierrors.IsNotFound(err):
			return nil
		}
		return err
	})
}
