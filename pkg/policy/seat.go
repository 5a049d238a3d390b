package policy

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lifeboat-k8s/lifeboat/pkg/apis/v1alpha1"
)

// SeatPreferenceWeight is the weight of the preference for the node of a Pod's handoff seat.
// With the Spot preference (SpotPreferenceWeight) a Spot seat node scores 200 against 100 for
// any other Spot node, so the default scheduler picks it while it has room.
const SeatPreferenceWeight int32 = 100

// SeatRecordTTL is how long an entry of a SeatRecord counts: a replacement comes within the
// evicted Pod's grace period; an older entry is a past handoff's.
const SeatRecordTTL = 10 * time.Minute

// SeatEntry is where the seat of one evicted Pod was, and when that was recorded.
type SeatEntry struct {
	Host string    `json:"host"`
	At   time.Time `json:"at"`
}

// SeatRecord is the AnnotationSeats document of a lifeboat Node: "namespace/name" of a Pod the
// handoff evicts → the kubernetes.io/hostname of the node its seat held room on.
type SeatRecord map[string]SeatEntry

// ParseSeatRecord reads an AnnotationSeats value; "" is an empty record.
func ParseSeatRecord(s string) (SeatRecord, error) {
	r := SeatRecord{}
	if s == "" {
		return r, nil
	}
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", v1alpha1.AnnotationSeats, err)
	}
	return r, nil
}

// Host is the seat host recorded for namespace/name key, "" when there is none younger than
// SeatRecordTTL.
func (r SeatRecord) Host(key string, now time.Time) string {
	e, _ := r.Entry(key, now)
	return e.Host
}

// Entry is the entry recorded for namespace/name key, false when there is none younger than
// SeatRecordTTL.
func (r SeatRecord) Entry(key string, now time.Time) (SeatEntry, bool) {
	e, ok := r[key]
	if !ok || now.Sub(e.At) > SeatRecordTTL {
		return SeatEntry{}, false
	}
	return e, true
}

// With returns the record with the hosts of add (key → host) recorded at now — an entry that
// already names the same host keeps its time — and without entries older than SeatRecordTTL,
// and whether that differs from r. Pure.
func (r SeatRecord) With(add map[string]string, now time.Time) (SeatRecord, bool) {
	out := SeatRecord{}
	changed := false
	for k, e := range r {
		if now.Sub(e.At) > SeatRecordTTL {
			changed = true
			continue
		}
		out[k] = e
	}
	for k, host := range add {
		if out.Host(k, now) != host {
			out[k], changed = SeatEntry{Host: host, At: now.UTC().Truncate(time.Second)}, true
		}
	}
	return out, changed
}

// Without returns the record without key, and whether key was in it. Pure.
func (r SeatRecord) Without(key string) (SeatRecord, bool) {
	if _, ok := r[key]; !ok {
		return r, false
	}
	out := maps.Clone(r)
	delete(out, key)
	return out, true
}

// String is the annotation value.
func (r SeatRecord) String() string {
	b, _ := json.Marshal(map[string]SeatEntry(maps.Clone(r))) // strings and times always marshal
	return string(b)
}

// preferSeatNode adds the preference for the seat's node (by kubernetes.io/hostname) unless
// the Pod has it already.
func preferSeatNode(pod *corev1.Pod, hostname string) {
	if hostname == "" {
		return
	}
	want := corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname}}
	aff := nodeAffinity(pod)
	for _, t := range aff.PreferredDuringSchedulingIgnoredDuringExecution {
		if len(t.Preference.MatchExpressions) == 1 && t.Preference.MatchExpressions[0].Key == want.Key &&
			len(t.Preference.MatchExpressions[0].Values) == 1 && t.Preference.MatchExpressions[0].Values[0] == hostname {
			return
		}
	}
	aff.PreferredDuringSchedulingIgnoredDuringExecution = append(aff.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: SeatPreferenceWeight, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{want}}})
}
