package awsemu_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsclient"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu"
	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/awsemu/awsemutest"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster/localclustertest"
)

func TestKubeNodeBinderNodeShape(t *testing.T) {
	b := &awsemu.KubeNodeBinder{Labels: map[string]string{"extra": "1"}}
	n := b.NodeFor(awsemu.BoundInstance{
		ID: "i-0123456789abcdef0", InstanceType: "m5.large", Zone: "us-east-1b", Region: "us-east-1",
		PrivateDNSName: "ip-10-0-0-7.ec2.internal", PrivateIP: "10.0.0.7",
		UserData: "#!/bin/bash\n/etc/eks/bootstrap.sh prod --kubelet-extra-args '--node-labels=team=web,tier=x --register-with-taints=dedicated=web:NoSchedule'",
		Tags:     map[string]string{cloud.TagPool: "web"},
	})
	if n.Name != "ip-10-0-0-7.ec2.internal" || n.Spec.ProviderID != "aws:///us-east-1b/i-0123456789abcdef0" {
		t.Errorf("name %q providerID %q", n.Name, n.Spec.ProviderID)
	}
	for k, want := range map[string]string{
		v1alpha1.LabelPool: "web", v1alpha1.LabelInstanceType: "m5.large", v1alpha1.LabelZone: "us-east-1b",
		"team": "web", "tier": "x", "extra": "1", corev1.LabelHostname: n.Name,
	} {
		if n.Labels[k] != want {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], want)
		}
	}
	taints := map[string]corev1.Taint{}
	for _, tt := range n.Spec.Taints {
		taints[tt.Key] = tt
	}
	if tt := taints[v1alpha1.TaintLifeboat]; tt.Value != "web" || tt.Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("lifeboat taint %+v", tt)
	}
	if _, ok := taints[v1alpha1.TaintStandby]; !ok {
		t.Error("no standby taint")
	}
	if tt := taints["dedicated"]; tt.Value != "web" || tt.Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("user-data taint %+v", tt)
	}
	if n.Annotations["kwok.x-k8s.io/node"] != "fake" || n.Annotations[awsemu.AnnotationReadyAt] == "" {
		t.Errorf("annotations %v", n.Annotations)
	}
	if n.Status.Capacity.Memory().Value() != 8<<30 {
		t.Errorf("memory %s", n.Status.Capacity.Memory())
	}
}

// TestKWOKBinding drives the emulator through the production Instances implementation against
// the real local control plane with KWOK: launch → Node Ready after the boot delay; hibernate →
// NotReady; resume → Ready after the resume delay; terminate → Node gone.
func TestKWOKBinding(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the local control plane binaries; run without -short (make test)")
	}
	c := localclustertest.StartT(t, localcluster.Options{KWOK: true})
	client := c.Client()
	delays := awsemu.Delays{
		Launch: 20 * time.Millisecond, NodeBoot: 300 * time.Millisecond,
		Stop:  20 * time.Millisecond,
		Start: 20 * time.Millisecond, NodeResume: 300 * time.Millisecond,
		Terminate: 20 * time.Millisecond,
	}
	s := awsemutest.StartT(t, awsemu.Options{Delays: delays, Binder: &awsemu.KubeNodeBinder{Client: client}})
	o := s.ClientOptions()
	o.BaseDelay, o.ThrottleBaseDelay, o.MaxBackoff = time.Millisecond, time.Millisecond, 10*time.Millisecond
	aws, err := awsclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	p := cloud.NewInstances(aws.EC2, cloud.InstancesOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	launched := time.Now()
	inst, err := p.Launch(ctx, cloud.LaunchRequest{
		Pool: "web", Slot: 0, Generation: 1, InstanceTypes: []string{"m5.large"}, SubnetIDs: []string{"subnet-a"},
		ImageID: "ami-1", RootVolumeGiB: 40,
	})
	if err != nil {
		t.Fatal(err)
	}
	node := waitNode(t, ctx, client, inst.PrivateDNSName, corev1.ConditionTrue)
	if seen := time.Since(launched); seen < delays.Launch+delays.NodeBoot {
		t.Errorf("Node Ready %s after launch, before the boot delay %s", seen, delays.Launch+delays.NodeBoot)
	}
	if node.Spec.ProviderID != inst.ProviderID() || node.Labels[v1alpha1.LabelPool] != "web" || node.Labels[v1alpha1.LabelInstanceType] != "m5.large" {
		t.Errorf("node %s: providerID %q labels %v", node.Name, node.Spec.ProviderID, node.Labels)
	}

	waitInstance(t, ctx, p, inst.ID, cloud.StateRunning)
	if err := p.Hibernate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	waitNode(t, ctx, client, inst.PrivateDNSName, corev1.ConditionFalse)
	waitInstance(t, ctx, p, inst.ID, cloud.StateStopped)

	resumed := time.Now()
	if err := p.Resume(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	waitNode(t, ctx, client, inst.PrivateDNSName, corev1.ConditionTrue)
	if seen := time.Since(resumed); seen < delays.Start+delays.NodeResume {
		t.Errorf("Node Ready %s after resume, before the resume delay %s", seen, delays.Start+delays.NodeResume)
	}

	if err := p.Terminate(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Nodes().Get(ctx, inst.PrivateDNSName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("node %s not removed after terminate: %v", inst.PrivateDNSName, err)
	}
}

func waitNode(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, ready corev1.ConditionStatus) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return localcluster.NodeReadyStatus(n) == ready, nil
	})
	if err != nil {
		t.Fatalf("node %s never Ready=%s: %v (last: %+v)", name, ready, err, node)
	}
	return node
}

func waitInstance(t *testing.T, ctx context.Context, p *cloud.EC2Instances, id, state string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		inst, err := p.Get(ctx, id)
		return err == nil && inst.State == state, nil
	})
	if err != nil {
		t.Fatalf("%s never %s: %v", id, state, err)
	}
}
