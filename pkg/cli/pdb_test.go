package cli

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestSuggestPDB(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	client := fake.NewClientset(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: appsv1.DeploymentSpec{Selector: sel}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ledger"}, Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ledger"}}}},
	)
	ctx := context.Background()
	got, err := suggestPDB(ctx, client, "shop", "deployment/web")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "pdb-web.golden", got)
	for _, ref := range []string{"deploy/web", "deployments/web", "Deployment/web"} {
		if again, err := suggestPDB(ctx, client, "shop", ref); err != nil || again != got {
			t.Errorf("%s: %v", ref, err)
		}
	}
	sts, err := suggestPDB(ctx, client, "shop", "sts/ledger")
	if err != nil || !strings.Contains(sts, "name: ledger-lifeboat") || !strings.Contains(sts, "app: ledger") {
		t.Errorf("sts/ledger: %v\n%s", err, sts)
	}
	for ref, want := range map[string]string{
		"web":                 "want KIND/NAME",
		"deployment/":         "want KIND/NAME",
		"job/batch":           "exempt from the PDB rule",
		"cronjob/nightly":     "exempt from the PDB rule",
		"daemonset/agent":     "want a deployment or statefulset",
		"deployment/missing":  "not found",
		"statefulset/missing": "not found",
	} {
		if _, err := suggestPDB(ctx, client, "shop", ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", ref, err, want)
		}
	}
}
