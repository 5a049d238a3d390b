package interruption

import (
	"testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruption"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		msg  interruption.Message
		want Signal
	}{
		{interruption.Message{Kind: interruption.KindSpotInterruption}, Interrupt},
		{interruption.Message{Kind: interruption.KindScheduledChange}, Interrupt},
		{interruption.Message{Kind: interruption.KindStateChange, State: "stopping"}, Interrupt},
		{interruption.Message{Kind: interruption.KindStateChange, State: "shutting-down"}, Interrupt},
		{interruption.Message{Kind: interruption.KindStateChange, State: "running"}, Ignore},
		{interruption.Message{Kind: interruption.KindStateChange, State: "pending"}, Ignore},
		{interruption.Message{Kind: interruption.KindRebalanceRecommendation}, Rebalance},
		{interruption.Message{Kind: interruption.KindNoOp}, Ignore},
	}
	for _, tt := range tests {
		if got := Classify(tt.msg); got != tt.want {
			t.Errorf("Classify(%s/%s) = %v, want %v", tt.msg.Kind, tt.msg.State, got, tt.want)
		}
	}
}
