package ledger

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecode(t *testing.T) {
	good := Claim{InstanceID: "i-1", For: "spot-1", InterruptedAt: "2026-11-30T07:00:00.123Z", Source: "sqs/spot-interruption", ClaimedAt: "2026-11-30T07:00:00.125Z", Holder: "abc/1"}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lifeboat-system", Name: Name}, Data: map[string]string{
		"sb-1": Encode(good),
		"sb-2": "{not json",
	}}
	got, err := Decode(cm)
	if err == nil || !strings.Contains(err.Error(), "[sb-2]") {
		t.Fatalf("error %v, want one naming sb-2", err)
	}
	good.Node = "sb-1"
	if got["sb-1"] != good {
		t.Errorf("sb-1 = %+v, want %+v", got["sb-1"], good)
	}
	if c, ok := got["sb-2"]; !ok || c.Node != "sb-2" {
		t.Errorf("sb-2 = %+v, %v: an unparsable entry must still hold its node", c, ok)
	}
	if ids := InstanceIDs(cm); len(ids) != 1 || !ids["i-1"] {
		t.Errorf("InstanceIDs = %v, want [i-1]", ids)
	}
}
