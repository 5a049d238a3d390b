package report

import (
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"
	"time"
)

// modeColours keep a mode's colour the same in every chart.
var modeColours = map[string]string{"baseline": "#c0392b", "lifeboat": "#2471a3", "overprovisioning": "#7d3c98"}

var kindColours = map[string]string{
	"karpenter-spot": "#27ae60", "karpenter-on-demand": "#b7950b", "lifeboat-standby": "#aab7b8",
	"lifeboat-active": "#2471a3", "lifeboat-draining": "#85c1e9", "other": "#566573",
}

const (
	chartW, chartH = 760, 220
	padL, padR     = 48, 12
	padT, padB     = 14, 30
)

type series struct {
	Name, Colour string
	Dash         bool
	Points       []point
}

type point struct {
	T time.Duration
	V float64
}

// chart renders one inline SVG line chart; no scripts, no external fonts.
func chart(title string, ss []series, markers []Marker, span time.Duration, maxV float64) template.HTML {
	if span <= 0 {
		span = time.Second
	}
	if maxV <= 0 {
		maxV = 1
	}
	x := func(t time.Duration) float64 {
		return padL + float64(chartW-padL-padR)*t.Seconds()/span.Seconds()
	}
	y := func(v float64) float64 { return padT + float64(chartH-padT-padB)*(1-v/maxV) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" aria-label="%s" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`,
		template.HTMLEscapeString(title), chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#ccc"/>`, padL, padT, chartW-padL-padR, chartH-padT-padB)
	for i := 0; i <= 4; i++ {
		v := maxV * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="10" text-anchor="end">%.0f</text>`, padL-4, y(v)+3, v)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`, padL, chartW-padR, y(v), y(v))
	}
	for i := 0; i <= 6; i++ {
		t := span * time.Duration(i) / 6
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>`, x(t), chartH-padB+14, t.Round(time.Second))
	}
	for _, m := range markers {
		colour := "#999"
		if m.Kind == "reclaim" {
			colour = "#c0392b"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-dasharray="2,3"><title>%s at %s</title></line>`,
			x(m.At), x(m.At), padT, chartH-padB, colour, template.HTMLEscapeString(m.Label), m.At.Round(time.Second))
	}
	for _, s := range ss {
		if len(s.Points) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), y(p.V)))
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="6,4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"><title>%s</title></polyline>`,
			s.Colour, dash, strings.Join(pts, " "), template.HTMLEscapeString(s.Name))
	}
	lx := padL + 6
	for _, s := range ss {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" font-size="10">%s</text>`,
			lx, padT+6, s.Colour, lx+13, padT+10, template.HTMLEscapeString(s.Name))
		lx += 20 + 6*len(s.Name)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from escaped values above
}

type workloadChart struct {
	Name  string
	Chart template.HTML
}

type htmlData struct {
	Report    *Report
	Modes     []string
	Outcome   []outcomeLine
	Columns   []string
	Rows      [][]cell
	Workloads []workloadChart
	Nodes     []workloadChart
	Savings   template.HTML
	// OnDemand charts Karpenter's On-Demand nodes per mode; empty when there were none.
	OnDemand template.HTML
	Table    string
}

type outcomeLine struct {
	Text  string
	Worse bool
}

type cell struct {
	Text  string
	Worse bool // a regression (Report.Worse)
}

// figureColumns head the HTML table of workload figures; figureRows fills it.
var figureColumns = []string{"mode", "workload", "replicas", "PDB floor", "min ready", "below floor (s)", "zero ready (s)",
	"below replicas (s)", "replica-seconds lost", "recovery (s)", "killed at reclaim", "Pods noticed"}

// figureRows is one row per mode and workload, the lifeboat figures that regress marked.
func figureRows(rep *Report) [][]cell {
	worse := map[[2]string]bool{}
	for _, r := range rep.Worse() {
		worse[[2]string{r.Workload, r.Metric}] = true
	}
	var rows [][]cell
	for _, m := range rep.ModeNames() {
		res := rep.Modes[m]
		for _, n := range sortedKeys(res.Workloads) {
			wr := res.Workloads[n]
			c := func(metric, text string) cell {
				return cell{Text: text, Worse: m == "lifeboat" && worse[[2]string{n, metric}]}
			}
			rows = append(rows, []cell{{Text: m}, {Text: n}, {Text: fmt.Sprint(wr.Replicas)}, {Text: fmt.Sprint(wr.PDBFloor)},
				c("min_ready", fmt.Sprint(wr.MinReady)),
				c("seconds_below_floor", fmt.Sprintf("%.0f", wr.SecondsBelowFloor)),
				c("seconds_zero_ready", fmt.Sprintf("%.0f", wr.SecondsZeroReady)),
				{Text: fmt.Sprintf("%.0f", wr.SecondsBelowReplicas)},
				c("replica_seconds_lost", thousands(wr.ReplicaSecondsLost)),
				c("recovery_seconds", fmt.Sprintf("%.0f", wr.RecoverySeconds)),
				c("pods_killed_at_reclaim", fmt.Sprint(wr.PodsKilledAtReclaim)),
				{Text: fmt.Sprint(wr.PodsNoticed)}})
		}
	}
	return rows
}

// WriteHTML writes report.html: the outcome in words (Report.Outcome) and the workload figures
// with the regressions marked, one chart of ready replicas per workload (every mode, the PDB
// floor dashed, event markers) and one chart of nodes by kind per mode. Self-contained.
func WriteHTML(w io.Writer, rep *Report, runs []*Run) error {
	var table strings.Builder
	_ = rep.writeFigures(&table)
	d := htmlData{Report: rep, Modes: rep.ModeNames(), Columns: figureColumns, Rows: figureRows(rep), Table: table.String()}
	for _, l := range append(rep.Outcome(), rep.Cautions()...) {
		d.Outcome = append(d.Outcome, outcomeLine{Text: l, Worse: strings.HasPrefix(l, "WORSE") || strings.HasPrefix(l, "CAUTION") || strings.HasPrefix(l, "EXPOSURE") || strings.HasPrefix(l, "LAYOUT")})
	}
	var span time.Duration
	names := map[string]WorkloadInfo{}
	for _, r := range runs {
		if n := len(r.Samples); n > 0 && r.Samples[n-1].At > span {
			span = r.Samples[n-1].At
		}
		for n, i := range r.Workloads {
			names[n] = i
		}
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var markers []Marker
	for _, r := range runs {
		if r.Mode == "baseline" || markers == nil {
			markers = r.Markers
		}
	}
	for _, n := range sorted {
		info := names[n]
		var ss []series
		for _, r := range runs {
			s := series{Name: r.Mode, Colour: colour(modeColours, r.Mode)}
			for _, smp := range r.Samples {
				s.Points = append(s.Points, point{smp.At, float64(smp.Workloads[n])})
			}
			ss = append(ss, s)
		}
		if info.PDBFloor > 0 {
			ss = append(ss, series{Name: "PDB floor", Colour: "#555", Dash: true,
				Points: []point{{0, float64(info.PDBFloor)}, {span, float64(info.PDBFloor)}}})
		}
		d.Workloads = append(d.Workloads, workloadChart{Name: n, Chart: chart("ready replicas of "+n, ss, markers, span, float64(info.Replicas)+1)})
	}
	var savings []series
	for _, r := range runs {
		s := series{Name: r.Mode, Colour: colour(modeColours, r.Mode)}
		for _, smp := range r.Samples {
			s.Points = append(s.Points, point{smp.At, 100 * smp.Savings})
		}
		savings = append(savings, s)
	}
	d.Savings = chart("Spot savings rate (%) of the running nodes", savings, markers, span, 100)
	d.OnDemand = onDemandChart(runs, markers, span)
	for _, r := range runs {
		var ss []series
		maxV := 1.0
		for _, k := range NodeKinds {
			s := series{Name: k, Colour: colour(kindColours, k)}
			any := false
			for _, smp := range r.Samples {
				v := float64(smp.Nodes[k])
				if v > 0 {
					any = true
				}
				if v > maxV {
					maxV = v
				}
				s.Points = append(s.Points, point{smp.At, v})
			}
			if any {
				ss = append(ss, s)
			}
		}
		d.Nodes = append(d.Nodes, workloadChart{Name: r.Mode, Chart: chart("nodes in "+r.Mode, ss, r.Markers, span, maxV+1)})
	}
	return page.Execute(w, d)
}

func colour(m map[string]string, k string) string {
	if c, ok := m[k]; ok {
		return c
	}
	return "#333"
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Lifeboat simulation: {{.Report.Scenario}}</title>
<style>body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;max-width:820px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:12px}
.chart{display:block;margin:8px 0}table.figures{border-collapse:collapse;font-size:12px}
table.figures th,table.figures td{border:1px solid #ddd;padding:3px 6px;text-align:right}
table.figures th:nth-child(-n+2),table.figures td:nth-child(-n+2){text-align:left}
.worse{color:#c0392b;font-weight:bold}</style></head><body>
<h1>Lifeboat simulation — {{.Report.Scenario}}</h1>
{{if .Outcome}}<h2>Outcome</h2><ul>{{range .Outcome}}<li{{if .Worse}} class="worse"{{end}}>{{.Text}}</li>{{end}}</ul>{{end}}
<p>Modes: {{range $i, $m := .Modes}}{{if $i}}, {{end}}{{$m}}{{end}}. Generated {{.Report.Generated.Format "2006-01-02 15:04:05 MST"}}.</p>
{{if .Report.Shortened}}<p>Shortened for the demo:</p><ul>{{range .Report.Shortened}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>Workloads</h2>
<p>After the first notice. Replica-seconds lost: desired − ready replicas, summed over the seconds with fewer ready than desired.{{if .Outcome}} In red: worse with Lifeboat than with Karpenter alone.{{end}}</p>
<table class="figures"><tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td{{if .Worse}} class="worse"{{end}}>{{.Text}}</td>{{end}}</tr>
{{end}}</table>
<h2>Ready replicas per workload</h2>
{{range .Workloads}}<h3>{{.Name}}</h3>{{.Chart}}{{end}}
<h2>Nodes by kind</h2>
{{range .Nodes}}<h3>{{.Name}}</h3>{{.Chart}}{{end}}
<h2>Spot savings rate</h2>
<p>1 − price of the running nodes / their On-Demand price, every second.</p>
{{.Savings}}
{{if .OnDemand}}<h2>On-Demand fallback nodes</h2>
<p>Karpenter's On-Demand nodes per mode: what it fell back to during the crunch, and what reclaim-back returned to Spot (Lifeboat mode).</p>
{{.OnDemand}}{{end}}
<h2>Summary as text</h2><p>What <code>lifeboat sim run</code> printed.</p><pre>{{.Table}}</pre>
</body></html>
`))

// onDemandChart compares Karpenter's On-Demand nodes across the modes; empty when no mode had
// one.
func onDemandChart(runs []*Run, markers []Marker, span time.Duration) template.HTML {
	var ss []series
	peak := 0
	for _, r := range runs {
		s := series{Name: r.Mode, Colour: colour(modeColours, r.Mode)}
		for _, smp := range r.Samples {
			n := smp.Nodes["karpenter-on-demand"]
			peak = max(peak, n)
			s.Points = append(s.Points, point{smp.At, float64(n)})
		}
		ss = append(ss, s)
	}
	if peak == 0 {
		return ""
	}
	return chart("Karpenter On-Demand nodes", ss, markers, span, float64(peak)+1)
}
