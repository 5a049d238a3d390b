package warmpool

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// Lifeboat's namespace enforces Pod Security "restricted" (manifests/namespace.yaml): a
// pre-pull Pod that violates it is rejected and the pool never reaches standby (seen in the
// simulation before this test existed).
func TestPrePullPodIsRestricted(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).Build()
	c := New(cl, nil, clocktesting.NewFakeClock(metav1.Now().Time), nil, Options{Namespace: v1alpha1.DefaultNamespace})
	pool := &v1alpha1.WarmPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	if err := c.ensurePrePull(context.Background(), pool, "node-1", []string{"registry.example/web:1", "envoy:1"}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: v1alpha1.DefaultNamespace, Name: PrePullPodName("node-1")}, pod); err != nil {
		t.Fatal(err)
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range eval.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			t.Errorf("pre-pull Pod violates Pod Security restricted: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
		}
	}
}
