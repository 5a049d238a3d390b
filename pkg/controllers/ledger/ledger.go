// Package ledger is the resume ledger: the ConfigMap in which the interruption controller
// records a burst's claims on standby nodes, in one write, before it starts their instances
// (the protocol is in pkg/controllers/interruption). This file is its format: one key per
// claimed node; the value is the claim as JSON. Store reads and writes it for one process. The
// ConfigMap is Lifeboat's state, not configuration: do not edit it.
package ledger

import (
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Name of the ledger ConfigMap, in Lifeboat's namespace.
const Name = "lifeboat-resume-ledger"

// Key is the ledger's key in namespace.
func Key(namespace string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: Name}
}

// Claim is one entry: a standby node claimed to resume for an interrupted Node.
type Claim struct {
	// Node is the claimed standby node (the entry's key).
	Node string `json:"-"`
	// InstanceID is the claimed node's instance.
	InstanceID string `json:"instanceID"`
	// For is the interrupted Node.
	For string `json:"for"`
	// InterruptedAt is when the notice was received (RFC 3339, nanoseconds).
	InterruptedAt string `json:"interruptedAt,omitempty"`
	// Source is the notice's source (sqs/spot-interruption, karpenter-event, ...).
	Source string `json:"source,omitempty"`
	// ClaimedAt is when the claim was decided (RFC 3339, nanoseconds).
	ClaimedAt string `json:"claimedAt,omitempty"`
	// Holder names the controller process and decision batch that wrote the entry.
	Holder string `json:"holder,omitempty"`
}

// Encode is the entry's value.
func Encode(c Claim) string {
	b, _ := json.Marshal(c)
	return string(b)
}

// Decode returns the ledger's entries by claimed node. An entry that does not parse is
// returned with only its Node set (it still holds its node: no plan picks it) and reported in
// the error.
func Decode(cm *corev1.ConfigMap) (map[string]Claim, error) {
	out := make(map[string]Claim, len(cm.Data))
	var bad []string
	for node, v := range cm.Data {
		c := Claim{}
		if err := json.Unmarshal([]byte(v), &c); err != nil {
			bad = append(bad, node)
		}
		c.Node = node
		out[node] = c
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return out, fmt.Errorf("resume ledger %s/%s: entries %v are not valid JSON claims (was the ConfigMap edited by hand?)", cm.Namespace, cm.Name, bad)
	}
	return out, nil
}

// InstanceIDs are the claimed instances of the ledger.
func InstanceIDs(cm *corev1.ConfigMap) map[string]bool {
	claims, _ := Decode(cm)
	out := make(map[string]bool, len(claims))
	for _, c := range claims {
		if c.InstanceID != "" {
			out[c.InstanceID] = true
		}
	}
	return out
}
