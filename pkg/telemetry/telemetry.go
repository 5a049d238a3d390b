// Package telemetry is the format of the capacity-pool interruption telemetry that the
// controller writes and the scheduler's CapacityPoolSpread plugin reads.
//
// It lives in one ConfigMap (Namespace/Name below), data key DataKey, as JSON:
//
//	{
//	  "windowSeconds": 3600,
//	  "updated": "2026-11-29T21:00:00Z",
//	  "pools": {
//	    "m5.large/us-east-1a/spot": {"interruptions": 9, "lastInterruption": "2026-11-29T20:58:00Z"}
//	  }
//	}
//
// A pool key is "<instance type>/<zone>/<capacity type>" (PoolKey). Counts cover the sliding
// window; a pool absent from the map had no interruption in it.
package telemetry

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

const (
	Namespace = v1alpha1.DefaultNamespace
	Name      = "lifeboat-pool-telemetry"
	DataKey   = "pools.json"
)

// Telemetry is the document stored under DataKey.
type Telemetry struct {
	WindowSeconds int64                `json:"windowSeconds"`
	Updated       time.Time            `json:"updated"`
	Pools         map[string]PoolStats `json:"pools"`
}

// PoolStats are one capacity pool's interruptions within the window.
type PoolStats struct {
	Interruptions    int32     `json:"interruptions"`
	LastInterruption time.Time `json:"lastInterruption,omitempty"`
}

// PoolKey names a capacity pool. Empty parts stay empty so that keys remain comparable.
func PoolKey(instanceType, zone, capacityType string) string {
	return instanceType + "/" + zone + "/" + capacityType
}

// PoolKeyFromLabels names the capacity pool of a node from its well-known labels.
func PoolKeyFromLabels(labels map[string]string) string {
	return PoolKey(labels[v1alpha1.LabelInstanceType], labels[v1alpha1.LabelZone], labels[v1alpha1.LabelCapacityType])
}

// Parse decodes the ConfigMap data. A missing document is an empty telemetry, not an error.
func Parse(data map[string]string) (*Telemetry, error) {
	t := &Telemetry{Pools: map[string]PoolStats{}}
	raw, ok := data[DataKey]
	if !ok || raw == "" {
		return t, nil
	}
	if err := json.Unmarshal([]byte(raw), t); err != nil {
		return nil, fmt.Errorf("parse %s/%s key %s: %w", Namespace, Name, DataKey, err)
	}
	if t.Pools == nil {
		t.Pools = map[string]PoolStats{}
	}
	return t, nil
}

// Encode renders the document for the ConfigMap's data.
func (t *Telemetry) Encode() (map[string]string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return map[string]string{DataKey: string(b)}, nil
}
