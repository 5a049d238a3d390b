package report

import (
	"strings"
	"testing"
	"time"
)

// crunchRun is a run sampled every 30 s with a crunch from 60 s to 150 s: odNodes[i] On-Demand
// nodes (0.1 $/h each) and the savings rate savings[i] at sample i.
func crunchRun(mode string, odNodes []int, savings []float64, extra ...Marker) *Run {
	r := &Run{Mode: mode, Interval: step, Workloads: map[string]WorkloadInfo{},
		Markers: append([]Marker{{At: 2 * step, Kind: "ice"}, {At: 5 * step, Kind: "ice-end"}}, extra...)}
	for i := range odNodes {
		r.Samples = append(r.Samples, Sample{At: time.Duration(i) * step, Savings: savings[i],
			Nodes: map[string]int{"karpenter-on-demand": odNodes[i]}, OnDemandHourly: 0.1 * float64(odNodes[i])})
	}
	return r
}

const step = 30 * time.Second

func TestFallback(t *testing.T) {
	//                 sample: 0    1    2    3    4    5    6    7    8    9
	baseOD := []int{0, 0, 1, 3, 3, 3, 3, 3, 3, 3}
	baseSav := []float64{.65, .65, .6, .4, .4, .4, .4, .4, .4, .4}
	lbOD := []int{0, 0, 1, 3, 3, 3, 2, 1, 0, 0}
	lbSav := []float64{.65, .65, .6, .4, .4, .4, .5, .62, .64, .65}
	window := []Marker{{At: 6 * step, Kind: "reclaim-back"}, {At: 9 * step, Kind: "reclaim-back-end"}}
	runs := []*Run{crunchRun("baseline", baseOD, baseSav), crunchRun("lifeboat", lbOD, lbSav, window...)}
	rep := New("regional-crunch", nil, 0.35, runs)

	b, l := rep.Modes["baseline"].Fallback, rep.Modes["lifeboat"].Fallback
	if b == nil || l == nil {
		t.Fatalf("no fallback figures: %+v %+v", b, l)
	}
	if b.SavingsRateBefore != 0.65 || b.SavingsRateEnd != 0.4 || b.SavingsBackAtSeconds != -1 || b.OnDemandNodesPeak != 3 || b.OnDemandNodesEnd != 3 {
		t.Errorf("baseline fallback %+v", b)
	}
	// Back within 5 points (≥ 0.60) from sample 7 (210 s) on; the last minute is samples 7–9.
	if l.SavingsBackAtSeconds != 210 || l.SavingsRateEnd != round4((.62+.64+.65)/3) || l.OnDemandNodesEnd != 0 || l.OnDemandDollarsPerHourEnd != 0 {
		t.Errorf("lifeboat fallback %+v", l)
	}
	// After the crunch (from sample 5): baseline 5 × 3 nodes × 30 s, lifeboat (3+2+1) × 30 s.
	if want := round4(450.0 / 3600); b.OnDemandNodeHoursAfterCrunch != want {
		t.Errorf("baseline node-hours after the crunch %v, want %v", b.OnDemandNodeHoursAfterCrunch, want)
	}
	rb := rep.ReclaimBack
	if rb == nil || rb.NodesReturned != 3 || rb.NodeHoursReturned != round4(270.0/3600) || rb.WindowOpenSeconds != 180 || rb.WindowCloseSeconds != 270 {
		t.Fatalf("reclaim-back comparison %+v", rb)
	}
	// 3 nodes × 0.1 $/h On-Demand, 65 % of it saved on Spot, 730 h.
	if rb.DollarsPerMonth != round2(0.3*0.65*730) {
		t.Errorf("dollars per month %v, want %v", rb.DollarsPerMonth, round2(0.3*0.65*730))
	}
	out := strings.Join(rep.Outcome(), "\n")
	for _, want := range []string{
		"Spot savings rate: 65% before the crunch; at the end Lifeboat 64%, back within 5 points at t0+210s (inside the reclaim-back window t0+180s–270s); Karpenter alone 40%",
		"On-Demand fallback nodes at the end: Lifeboat 0, Karpenter alone 3: reclaim-back returned 3 to Spot",
		"(0.07 On-Demand node-hours in this run; $142.35 a month at these prices)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("outcome lacks %q:\n%s", want, out)
		}
	}

	var page strings.Builder
	if err := WriteHTML(&page, rep, runs); err != nil || !strings.Contains(page.String(), "<h2>On-Demand fallback nodes</h2>") {
		t.Errorf("report.html has no On-Demand chart (err %v)", err)
	}

	// Without a crunch there is nothing to say.
	plain := New("s", nil, 0.35, []*Run{run("baseline", time.Second, []int32{12}), run("lifeboat", time.Second, []int32{12})})
	if plain.ReclaimBack != nil || plain.Modes["lifeboat"].Fallback != nil || strings.Contains(strings.Join(plain.Outcome(), "\n"), "savings") {
		t.Errorf("a run without a crunch reports fallback figures: %+v", plain.ReclaimBack)
	}
}
