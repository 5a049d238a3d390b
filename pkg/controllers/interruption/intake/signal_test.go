package intake

import (
	"testing"

	"github.com/lifeboat-k8s/lifeboat/pkg/cloud/interruptionqueue"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		msg  interruptionqueue.Message
		want Signal
	}{
		{interruptionqueue.Message{Kind: interruptionqueue.KindSpotInterruption}, Interrupt},
		{interruptionqueue.Message{Kind: interruptionqueue.KindScheduledChange}, Interrupt},
		{interruptionqueue.Message{Kind: interruptionqueue.KindStateChange, State: "stopping"}, Interrupt},
		{interruptionqueue.Message{Kind: interruptionqueue.KindStateChange, State: "shutting-down"}, Interrupt},
		{interruptionqueue.Message{Kind: interruptionqueue.KindStateChange, State: "running"}, Ignore},
		{interruptionqueue.Message{Kind: interruptionqueue.KindStateChange, State: "pending"}, Ignore},
		{interruptionqueue.Message{Kind: interruptionqueue.KindRebalanceRecommendation}, Rebalance},
		{interruptionqueue.Message{Kind: interruptionqueue.KindNoOp}, Ignore},
	}
	for _, tt := range tests {
		if got := Classify(tt.msg); got != tt.want {
			t.Errorf("Classify(%s/%s) = %v, want %v", tt.msg.Kind, tt.msg.State, got, tt.want)
		}
	}
}
