package assess

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON prints the report in its stable schema (docs/ASSESS.md).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable prints the report for a terminal: summary, workloads, fixes, the curve, the
// cluster. Money is USD a month; the figures are the JSON's, rounded.
func (r *Report) WriteTable(out io.Writer) error {
	tw := newTableWriter(out)
	r.writeSummary(tw)
	r.writeWorkloads(tw)
	tw.Flush()
	r.writeFixes(out) // not aligned: a fix may span lines
	tw = newTableWriter(out)
	r.writeCurve(tw)
	writeNodePools(tw, r.Cluster.NodePools)
	writeCapacityPools(tw, r.Cluster.CapacityPools)
	writeExposure(tw, r.Cluster.Exposure)
	writeWarmPool(tw, r.Cluster.WarmPool)
	writeFindings(tw, r.Findings)
	return tw.Flush()
}

func newTableWriter(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
}

// writeSummary prints the heading, the class counts and the money totals.
func (r *Report) writeSummary(tw io.Writer) {
	s := r.Summary
	fmt.Fprintf(tw, "SPOT ASSESSMENT (%s; prices %s %s, Spot discount %.0f %%)\n", r.Scope, r.Prices.Region, dateOnly(r.Prices.Date), r.Prices.SpotDiscount*100)
	fmt.Fprintf(tw, "  %d workloads, %d Pods, %d nodes: %d ready, %d ready-with-changes, %d checkpoint-needed, %d poor-fit\n",
		s.Workloads, s.Pods, s.Nodes, s.ByClass[ClassReady], s.ByClass[ClassReadyWithChanges], s.ByClass[ClassCheckpointNeeded], s.ByClass[ClassPoorFit])
	fmt.Fprintf(tw, "  spend $%.2f/month as placed; $%.2f all On-Demand, $%.2f all Spot\n", s.MonthlyCost, s.MonthlyOnDemand, s.MonthlySpot)
	fmt.Fprintf(tw, "  possible Spot savings $%.2f/month (%s); $%.2f of it not taken yet; poor-fit workloads forgo $%.2f\n",
		s.PossibleSavings, r.Curve.Headline, s.RemainingSavings, s.PoorFitSavings)
}

// writeWorkloads prints a row per workload with its reason codes, then the unclassified Pods.
func (r *Report) writeWorkloads(tw io.Writer) {
	fmt.Fprintln(tw, "\nWORKLOADS")
	fmt.Fprintln(tw, "  WORKLOAD\tCLASS\tTIER\tREPLICAS\tPODS\tON SPOT\t$/MONTH\tSAVINGS/MONTH\tREASONS")
	for _, w := range r.Workloads {
		codes := make([]string, len(w.Reasons))
		for i, rs := range w.Reasons {
			codes[i] = string(rs.Code)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%.2f\t%.2f\t%s\n", w.Ref(), w.Class, dash(w.Tier), w.Replicas, w.Pods, w.OnSpotPods,
			w.MonthlyCost, w.MonthlySavings, dash(strings.Join(codes, ",")))
	}
	if len(r.Unclassified) > 0 {
		fmt.Fprintln(tw, "\nNOT CLASSIFIED")
		for _, u := range r.Unclassified {
			fmt.Fprintf(tw, "  %s/%s/%s\t%d Pods\t%s\n", u.Namespace, lower(u.OwnerKind), u.OwnerName, u.Pods, u.Reason)
		}
	}
}

// writeFixes prints every reason of every workload with its fix.
func (r *Report) writeFixes(out io.Writer) {
	fmt.Fprintln(out, "\nFIXES")
	any := false
	for _, w := range r.Workloads {
		for _, rs := range w.Reasons {
			any = true
			fmt.Fprintf(out, "  %s [%s] %s\n      fix: %s\n", w.Ref(), rs.Code, rs.Message, tableFix(w, rs))
		}
	}
	if !any {
		fmt.Fprintln(out, "  none")
	}
}

// tableFix is a reason's fix for the terminal: the missing PDB's YAML gives way to the command
// that prints it (-o json keeps the YAML).
func tableFix(w Workload, rs Reason) string {
	if rs.Code == ReasonMissingPDB {
		return "lifeboat pdb " + lower(w.Kind) + "/" + w.Name + " -n " + w.Namespace + " | kubectl apply -f -"
	}
	return rs.Fix
}

// maxCurveRows bounds the curve's rows in the table.
const maxCurveRows = 15

// writeCurve prints the headline and the first points of the savings curve.
func (r *Report) writeCurve(tw io.Writer) {
	fmt.Fprintln(tw, "\nSAVINGS CURVE (by savings per unit of risk)")
	fmt.Fprintf(tw, "  %s\n", r.Curve.Headline)
	if len(r.Curve.Points) > 0 {
		fmt.Fprintln(tw, "  RANK\tWORKLOAD\tCLASS\tSAVINGS/MONTH\tCUMULATIVE\t%")
	}
	for i, p := range r.Curve.Points {
		if i == maxCurveRows {
			fmt.Fprintf(tw, "  …\t%d more (-o json has them all)\n", len(r.Curve.Points)-i)
			break
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%.2f\t%.2f\t%.1f\n", p.Rank, p.Workload, p.Class, p.MonthlySavings, p.Cumulative, p.CumulativePercent)
	}
}

func writeNodePools(tw io.Writer, nodePools []NodePool) {
	fmt.Fprintln(tw, "\nKARPENTER NODEPOOLS")
	if len(nodePools) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintln(tw, "  NAME\tSPOT\tCAPACITY TYPES\tINSTANCE TYPES\tZONES\tCAPACITY POOLS\tCONSOLIDATION\tNODES")
	}
	for _, np := range nodePools {
		pools := fmt.Sprint(np.CapacityPools)
		if !np.Constrained {
			pools += " (observed; not pinned)"
		}
		fmt.Fprintf(tw, "  %s\t%v\t%s\t%s\t%s\t%s\t%s\t%d\n", np.Name, np.SpotAllowed, np.CapacityType, listOrAny(np.InstanceTypes), listOrAny(np.Zones), pools, np.ConsolidationPolicy, np.Nodes)
	}
}

// maxCapacityPoolRows bounds the capacity pools' rows in the table.
const maxCapacityPoolRows = 10

func writeCapacityPools(tw io.Writer, pools []CapacityPool) {
	fmt.Fprintln(tw, "\nCAPACITY POOLS (instance type / zone / capacity type)")
	if len(pools) > 0 {
		fmt.Fprintln(tw, "  POOL\tNODES\tPODS\tELIGIBLE\tPROTECTED")
	}
	for i, p := range pools {
		if i == maxCapacityPoolRows {
			fmt.Fprintf(tw, "  …\t%d more\n", len(pools)-i)
			break
		}
		fmt.Fprintf(tw, "  %s/%s/%s\t%d\t%d\t%d\t%d\n", p.InstanceType, p.Zone, p.CapacityType, p.Nodes, p.Pods, p.EligiblePods, p.ProtectedPods)
	}
}

func writeExposure(tw io.Writer, e Exposure) {
	fmt.Fprintln(tw, "\nCORRELATED-RECLAIM EXPOSURE")
	if e.Pool != "" {
		fmt.Fprintf(tw, "  %.1f %% of the %s Pods (%d of %d) in one pool: %s (%d nodes)\n", e.Share*100, e.Basis, e.Pods, e.Of, e.Pool, e.Nodes)
	}
	if e.Note != "" {
		fmt.Fprintf(tw, "  %s\n", e.Note)
	}
}

func writeWarmPool(tw io.Writer, wp WarmPoolAdvice) {
	fmt.Fprintln(tw, "\nWARM POOL (size: auto)")
	if wp.InstanceType != "" {
		fmt.Fprintf(tw, "  %d × %s covering %s: $%.2f/month (EBS %d GiB each + %g reclaims × %g min active) vs overprovisioning $%.2f/month\n",
			wp.Size, wp.InstanceType, dash(wp.Covers), wp.MonthlyCost, wp.EBSGiBPerNode, wp.RunsPerMonth, wp.ActiveMinutes, wp.OverprovisioningMonthlyCost)
	}
	if wp.Note != "" {
		fmt.Fprintf(tw, "  %s\n", wp.Note)
	}
}

func writeFindings(tw io.Writer, findings []Finding) {
	fmt.Fprintln(tw, "\nFINDINGS")
	if len(findings) == 0 {
		fmt.Fprintln(tw, "  none")
	}
	for _, f := range findings {
		fmt.Fprintf(tw, "  %s [%s] %s\n", f.Severity, f.Code, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(tw, "      fix: %s\n", f.Fix)
		}
	}
}

func dateOnly(s string) string {
	d, _, _ := strings.Cut(s, "T")
	return d
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listOrAny(l []string) string {
	if len(l) == 0 {
		return "any"
	}
	return strings.Join(l, ",")
}

// WriteHTML writes a self-contained page: the savings curve as an inline SVG chart, the
// per-workload findings, the cluster. No scripts, styles or fonts are fetched.
func (r *Report) WriteHTML(w io.Writer) error {
	return pageTemplate.Execute(w, struct {
		*Report
		Chart template.HTML
	}{r, template.HTML(r.curveSVG())}) //nolint:gosec // curveSVG escapes every text it writes
}

// curveSVG draws cumulative savings against the number of workloads taken in curve order.
func (r *Report) curveSVG() string {
	const W, H, pad = 720.0, 300.0, 48.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="savings curve">`, W, H, W, H)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#fff"/>`, W, H)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/>`,
		pad, H-pad, W-pad/2, H-pad, pad, pad/2, pad, H-pad)
	n := len(r.Curve.Points)
	if n == 0 || r.Curve.Total <= 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="14">%s</text></svg>`, pad+10, H/2, template.HTMLEscapeString(r.Curve.Headline))
		return b.String()
	}
	x := func(i int) float64 { return pad + (W-1.5*pad)*float64(i)/float64(n) }
	y := func(v float64) float64 { return H - pad - (H-1.5*pad)*v/r.Curve.Total }
	colors := map[Class]string{ClassReady: "#2e7d32", ClassReadyWithChanges: "#f9a825", ClassCheckpointNeeded: "#ef6c00"}
	prevX, prevY := x(0), y(0)
	for i, p := range r.Curve.Points {
		cx, cy := x(i+1), y(p.Cumulative)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"><title>%s</title></line>`,
			prevX, prevY, cx, cy, colors[p.Class], template.HTMLEscapeString(fmt.Sprintf("%d. %s (%s): $%.2f, cumulative $%.2f (%.1f %%)", p.Rank, p.Workload, p.Class, p.MonthlySavings, p.Cumulative, p.CumulativePercent)))
		prevX, prevY = cx, cy
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#999" stroke-dasharray="4 4"/>`, pad, y(0.8*r.Curve.Total), W-pad/2, y(0.8*r.Curve.Total))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="11" fill="#666">80 %%</text>`, W-pad/2-30, y(0.8*r.Curve.Total)-4)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="12">workloads taken in order (%d)</text>`, W/2-80, H-12, n)
	fmt.Fprintf(&b, `<text x="6" y="%.0f" font-size="12">$%.0f</text><text x="6" y="%.0f" font-size="12">$0</text>`, y(r.Curve.Total)+4, r.Curve.Total, H-pad+4)
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="12" fill="#2e7d32">ready</text><text x="%.0f" y="20" font-size="12" fill="#f9a825">ready-with-changes</text><text x="%.0f" y="20" font-size="12" fill="#ef6c00">checkpoint-needed</text>`,
		pad+10, pad+70, pad+210)
	b.WriteString(`</svg>`)
	return b.String()
}

var pageTemplate = template.Must(template.New("assess").Funcs(template.FuncMap{
	"money": func(v float64) string { return fmt.Sprintf("$%.2f", v) },
	"pct":   func(v float64) string { return fmt.Sprintf("%.1f %%", v*100) },
	"lower": lower,
	"count": func(m map[Class]int, c string) int { return m[Class(c)] },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Lifeboat Spot assessment — {{.Scope}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;width:100%;margin:.5em 0 1.5em}th,td{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right}.ready{color:#2e7d32}.ready-with-changes{color:#b8860b}.checkpoint-needed{color:#ef6c00}.poor-fit{color:#c62828}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;margin:2px 0}small{color:#666}
</style></head><body>
<h1>Spot assessment</h1>
<p><small>{{.Scope}} · generated {{.GeneratedAt}} · prices {{.Prices.Region}} {{.Prices.Date}} ({{.Prices.Source}}) · Spot discount {{pct .Prices.SpotDiscount}} · schema {{.SchemaVersion}}</small></p>
<p>{{.Summary.Workloads}} workloads, {{.Summary.Pods}} Pods, {{.Summary.Nodes}} nodes:
<span class="ready">{{count .Summary.ByClass "ready"}} ready</span>,
<span class="ready-with-changes">{{count .Summary.ByClass "ready-with-changes"}} ready-with-changes</span>,
<span class="checkpoint-needed">{{count .Summary.ByClass "checkpoint-needed"}} checkpoint-needed</span>,
<span class="poor-fit">{{count .Summary.ByClass "poor-fit"}} poor-fit</span>.
Spend {{money .Summary.MonthlyCost}}/month as placed ({{money .Summary.MonthlyOnDemand}} all On-Demand, {{money .Summary.MonthlySpot}} all Spot).
Possible savings {{money .Summary.PossibleSavings}}/month, {{money .Summary.RemainingSavings}} not taken yet.</p>
<h2>Savings curve</h2>
<p><b>{{.Curve.Headline}}</b></p>
{{.Chart}}
<h2>Workloads</h2>
<table><tr><th>workload</th><th>class</th><th>tier</th><th>replicas</th><th>Pods (on Spot)</th><th>$/month</th><th>savings/month</th><th>reasons and fixes</th></tr>
{{range .Workloads}}<tr><td>{{.Namespace}}/{{lower .Kind}}/{{.Name}}</td><td class="{{.Class}}">{{.Class}}</td><td>{{.Tier}}</td><td class="n">{{.Replicas}}</td><td class="n">{{.Pods}} ({{.OnSpotPods}})</td><td class="n">{{money .MonthlyCost}}</td><td class="n">{{money .MonthlySavings}}</td>
<td>{{range .Reasons}}<div><b class="{{.Class}}">{{.Code}}</b>: {{.Message}}<pre>{{.Fix}}</pre></div>{{else}}—{{end}}</td></tr>
{{end}}</table>
{{if .Unclassified}}<h2>Not classified</h2><table><tr><th>owner</th><th>Pods</th><th>why</th></tr>
{{range .Unclassified}}<tr><td>{{.Namespace}}/{{lower .OwnerKind}}/{{.OwnerName}}</td><td class="n">{{.Pods}}</td><td>{{.Reason}}</td></tr>{{end}}</table>{{end}}
<h2>Karpenter NodePools</h2>
<table><tr><th>name</th><th>Spot</th><th>capacity types</th><th>instance types</th><th>zones</th><th>capacity pools</th><th>consolidation</th><th>nodes</th></tr>
{{range .Cluster.NodePools}}<tr><td>{{.Name}}</td><td>{{.SpotAllowed}}</td><td>{{.CapacityType}}</td><td>{{range .InstanceTypes}}{{.}} {{else}}any{{end}}</td><td>{{range .Zones}}{{.}} {{else}}any{{end}}</td><td class="n">{{.CapacityPools}}{{if not .Constrained}} (observed){{end}}</td><td>{{.ConsolidationPolicy}}</td><td class="n">{{.Nodes}}</td></tr>
{{else}}<tr><td colspan="8">none</td></tr>{{end}}</table>
<h2>Capacity pools</h2>
<table><tr><th>instance type</th><th>zone</th><th>capacity type</th><th>nodes</th><th>Pods</th><th>eligible</th><th>protected</th></tr>
{{range .Cluster.CapacityPools}}<tr><td>{{.InstanceType}}</td><td>{{.Zone}}</td><td>{{.CapacityType}}</td><td class="n">{{.Nodes}}</td><td class="n">{{.Pods}}</td><td class="n">{{.EligiblePods}}</td><td class="n">{{.ProtectedPods}}</td></tr>{{end}}</table>
<h2>Correlated-reclaim exposure and warm pool</h2>
{{with .Cluster.Exposure}}<p>{{if .Pool}}{{pct .Share}} of the {{.Basis}} Pods ({{.Pods}} of {{.Of}}) in one pool: {{.Pool}} ({{.Nodes}} nodes). {{end}}{{.Note}}</p>{{end}}
{{with .Cluster.WarmPool}}<p>size: auto → {{.Size}} × {{.InstanceType}} covering {{.Covers}}: {{money .MonthlyCost}}/month, against {{money .OverprovisioningMonthlyCost}}/month for overprovisioning the same cover. {{.Note}}</p>{{end}}
<h2>Findings</h2>
<table><tr><th>severity</th><th>code</th><th>finding</th><th>fix</th></tr>
{{range .Findings}}<tr><td>{{.Severity}}</td><td>{{.Code}}</td><td>{{.Message}}</td><td>{{.Fix}}</td></tr>{{else}}<tr><td colspan="4">none</td></tr>{{end}}</table>
</body></html>
`))
