package localcluster

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMatchDelay(t *testing.T) {
	rules := []DelayRule{
		{Selector: map[string]string{"lifeboat.dev/pool": "p"}, Delay: 15 * time.Second},
		{Selector: map[string]string{"karpenter.sh/nodepool": "default"}, Delay: 45 * time.Second, Jitter: 10 * time.Second},
	}
	if d := matchDelay(rules, map[string]string{"lifeboat.dev/pool": "p", "karpenter.sh/nodepool": "default"}, nil, false, 1, "n"); d != 15*time.Second {
		t.Errorf("first match should win: %s", d)
	}
	if d := matchDelay(rules, map[string]string{"other": "x"}, nil, false, 1, "n"); d != 0 {
		t.Errorf("no match should be 0: %s", d)
	}
	seen := map[time.Duration]bool{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		d := matchDelay(rules, map[string]string{"karpenter.sh/nodepool": "default"}, nil, false, 7, name)
		if d < 35*time.Second || d > 55*time.Second {
			t.Errorf("%s: %s outside 45s ± 10s", name, d)
		}
		if again := matchDelay(rules, map[string]string{"karpenter.sh/nodepool": "default"}, nil, false, 7, name); again != d {
			t.Errorf("%s: jitter not deterministic (%s vs %s)", name, d, again)
		}
		seen[d] = true
	}
	if len(seen) < 3 {
		t.Errorf("jitter does not spread: %v", seen)
	}
}

func TestStartTimeCachedImages(t *testing.T) {
	rules := []DelayRule{
		{Selector: map[string]string{"lifeboat.dev/pool": "p"}, Delay: time.Second},
		{ImagesCached: true, Delay: 3 * time.Second},
		{Delay: 10 * time.Second},
	}
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	node := func(name string, labels map[string]string, listed ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		for _, img := range listed {
			n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{img}})
		}
		return n
	}
	cases := []struct {
		name   string
		node   *corev1.Node
		images []string
		pulls  map[string]time.Time
		want   time.Duration // after t0
	}{
		{"cold", node("a", nil), []string{"app:1"}, nil, 10 * time.Second},
		{"listed on the node", node("a", nil, "app:1"), []string{"app:1"}, nil, 3 * time.Second},
		{"one of two images missing", node("a", nil, "app:1"), []string{"app:1", "side:1"}, nil, 10 * time.Second},
		{"pulled earlier by another Pod", node("a", nil), []string{"app:1"}, map[string]time.Time{"a\x00app:1": t0.Add(-time.Minute)}, 3 * time.Second},
		{"another Pod's pull still running: wait for it", node("a", nil), []string{"app:1"}, map[string]time.Time{"a\x00app:1": t0.Add(7 * time.Second)}, 10 * time.Second},
		{"pulled on another node only", node("b", nil), []string{"app:1"}, map[string]time.Time{"a\x00app:1": t0}, 10 * time.Second},
		{"pool nodes by label", node("a", map[string]string{"lifeboat.dev/pool": "p"}), []string{"app:1"}, nil, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pulls := map[string]time.Time{}
			maps.Copy(pulls, c.pulls)
			got := startTime(rules, c.node, nil, c.images, pulls, t0, 1, "p")
			if got.Sub(t0) != c.want {
				t.Errorf("start %s after t0, want %s", got.Sub(t0), c.want)
			}
		})
	}

	// A cold start records its images: the next Pod on the node waits for that pull, not longer.
	pulls := map[string]time.Time{}
	n := node("a", nil)
	first := startTime(rules, n, nil, []string{"app:1"}, pulls, t0, 1, "p1")
	recordPulls(pulls, n, []string{"app:1"}, first)
	if second := startTime(rules, n, nil, []string{"app:1"}, pulls, t0.Add(time.Second), 1, "p2"); second != first.Add(3*time.Second) {
		t.Errorf("second Pod starts %s after the first, want 3s (the pull is shared)", second.Sub(first))
	}
	if later := startTime(rules, n, nil, []string{"app:1"}, pulls, t0.Add(time.Minute), 1, "p3"); later != t0.Add(time.Minute+3*time.Second) {
		t.Errorf("a Pod after the pull starts %s after t0, want 1m3s", later.Sub(t0))
	}
	// A rule for Pods by label: a placeholder starts once its images are there, with no app.
	placeholder := append([]DelayRule{{PodSelector: map[string]string{"seat": "true"}, Delay: 8 * time.Second}}, rules...)
	if got := startTime(placeholder, node("c", nil), map[string]string{"seat": "true"}, []string{"app:1"}, map[string]time.Time{}, t0, 1, "s"); got != t0.Add(8*time.Second) {
		t.Errorf("a placeholder starts %s after t0, want 8s (its own rule)", got.Sub(t0))
	}
	if got := startTime(placeholder, node("c", nil), map[string]string{"app": "x"}, []string{"app:1"}, map[string]time.Time{}, t0, 1, "p"); got != t0.Add(10*time.Second) {
		t.Errorf("an app Pod starts %s after t0, want 10s (the placeholder rule is not its)", got.Sub(t0))
	}
	recordPulls(pulls, node("a", nil, "app:1"), []string{"app:1", "listed:1"}, t0)
	if _, ok := pulls["a\x00listed:1"]; !ok {
		t.Errorf("an image not listed and not pulled before was not recorded")
	}
}

func TestPodImages(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Image: "init:1"}},
		Containers:     []corev1.Container{{Image: "app:1"}, {Image: "init:1"}, {Image: ""}},
		Volumes:        []corev1.Volume{{Name: "cfg"}, {Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "data:1"}}}},
	}}
	if got, want := PodImages(p), []string{"init:1", "app:1", "data:1"}; !slices.Equal(got, want) {
		t.Errorf("PodImages = %v, want %v", got, want)
	}
}
