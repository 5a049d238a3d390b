package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Run is one measurement: one profile scheduling PodsPerRun fresh pods.
type Run struct {
	Rep                      int                `json:"rep"`
	Profile                  string             `json:"profile"`
	Namespace                string             `json:"namespace"`
	Pods                     int                `json:"pods"`
	CreateSeconds            float64            `json:"createSeconds"`
	ElapsedSeconds           float64            `json:"elapsedSeconds"`
	PodsPerSecond            float64            `json:"podsPerSecond"`
	ProtectedOnLifeboatNodes int                `json:"protectedOnLifeboatNodes"`
	ExtensionPointP99Ms      map[string]float64 `json:"extensionPointP99Ms"`
	PluginP99Ms              map[string]float64 `json:"pluginP99Ms"`
}

// ProfileSummary aggregates the runs of one profile.
type ProfileSummary struct {
	PodsPerSecondMean   float64            `json:"podsPerSecondMean"`
	PodsPerSecondMedian float64            `json:"podsPerSecondMedian"`
	PodsPerSecondMin    float64            `json:"podsPerSecondMin"`
	PodsPerSecondMax    float64            `json:"podsPerSecondMax"`
	ExtensionPointP99Ms map[string]float64 `json:"extensionPointP99MsMedian"`
	PluginP99Ms         map[string]float64 `json:"pluginP99MsMedian"`
}

// Report is the JSON document written to .lifeboat/bench/scheduler.json.
type Report struct {
	Command           []string  `json:"command"`
	Started           time.Time `json:"started"`
	Finished          time.Time `json:"finished"`
	Nodes             int       `json:"nodes"`
	PoolNodes         int       `json:"poolNodes"`
	PodsPerRun        int       `json:"podsPerRun"`
	ProtectedFraction float64   `json:"protectedFraction"`
	Owners            int       `json:"owners"`
	Reps              int       `json:"reps"`
	ClientQPS         int       `json:"clientQPS"`
	// LifeboatPercentageOfNodesToScoreOverride: -1 = the profile as configured.
	LifeboatPercentageOfNodesToScoreOverride int                       `json:"lifeboatPercentageOfNodesToScoreOverride"`
	SchedulerPerfBasicThreshold              float64                   `json:"schedulerPerfSchedulingBasicThreshold5000Nodes"`
	Runs                                     []Run                     `json:"runs"`
	Profiles                                 map[string]ProfileSummary `json:"profiles"`
	// ThroughputRatio is the lifeboat profile's median pods/s over the default profile's.
	ThroughputRatio float64 `json:"throughputRatioLifeboatOverDefault"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Summarize fills Profiles and ThroughputRatio from Runs.
func (r *Report) Summarize() {
	r.Profiles = map[string]ProfileSummary{}
	for _, profile := range profiles {
		var pps []float64
		ep, pl := map[string][]float64{}, map[string][]float64{}
		for _, run := range r.Runs {
			if run.Profile != profile {
				continue
			}
			pps = append(pps, run.PodsPerSecond)
			for k, v := range run.ExtensionPointP99Ms {
				ep[k] = append(ep[k], v)
			}
			for k, v := range run.PluginP99Ms {
				pl[k] = append(pl[k], v)
			}
		}
		s := ProfileSummary{ExtensionPointP99Ms: map[string]float64{}, PluginP99Ms: map[string]float64{}}
		var sum float64
		s.PodsPerSecondMin = math.Inf(1)
		for _, v := range pps {
			sum += v
			s.PodsPerSecondMin = math.Min(s.PodsPerSecondMin, v)
			s.PodsPerSecondMax = math.Max(s.PodsPerSecondMax, v)
		}
		if len(pps) > 0 {
			s.PodsPerSecondMean = round(sum/float64(len(pps)), 1)
		}
		s.PodsPerSecondMedian = round(median(pps), 1)
		s.PodsPerSecondMin, s.PodsPerSecondMax = round(s.PodsPerSecondMin, 1), round(s.PodsPerSecondMax, 1)
		for k, v := range ep {
			s.ExtensionPointP99Ms[k] = round(median(v), 3)
		}
		for k, v := range pl {
			s.PluginP99Ms[k] = round(median(v), 3)
		}
		r.Profiles[profile] = s
	}
	if d := r.Profiles[profileDefault].PodsPerSecondMedian; d > 0 {
		r.ThroughputRatio = round(r.Profiles[profiles[1]].PodsPerSecondMedian/d, 3)
	}
}

// SummaryLine is the one-line result printed at the end.
func (r *Report) SummaryLine() string {
	return fmt.Sprintf("median pods/s: default-scheduler %.1f, lifeboat-scheduler %.1f, ratio %.3f (scheduler_perf SchedulingBasic threshold: %.0f pods/s at 5000 nodes)",
		r.Profiles[profileDefault].PodsPerSecondMedian, r.Profiles[profiles[1]].PodsPerSecondMedian, r.ThroughputRatio, r.SchedulerPerfBasicThreshold)
}
