package podrole

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

func TestRoles(t *testing.T) {
	tests := []struct {
		name      string
		labels    map[string]string
		protected bool
		seat      string
		rides     bool
	}{
		{"unlabelled", nil, false, "", false},
		{"protected", map[string]string{v1alpha1.LabelProtected: "true"}, true, "", true},
		{"protected with a seat", map[string]string{v1alpha1.LabelProtected: "true", v1alpha1.LabelSeatHost: "ip-10-0-1-5"}, true, "ip-10-0-1-5", false},
		// The seat label counts only with the webhook's protection (a user's copy of it does not).
		{"a seat label without protection", map[string]string{v1alpha1.LabelSeatHost: "ip-10-0-1-5"}, false, "", false},
		{"protected false", map[string]string{v1alpha1.LabelProtected: "false"}, false, "", false},
	}
	for _, tt := range tests {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}
		if got := Protected(p); got != tt.protected {
			t.Errorf("%s: Protected = %v, want %v", tt.name, got, tt.protected)
		}
		if got := SeatHost(p); got != tt.seat {
			t.Errorf("%s: SeatHost = %q, want %q", tt.name, got, tt.seat)
		}
		if got := RidesLifeboats(p); got != tt.rides {
			t.Errorf("%s: RidesLifeboats = %v, want %v", tt.name, got, tt.rides)
		}
	}
}
