package chart

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	// The wiring packages the binaries' mains import, and with them every package that
	// registers a metric: lifeboat-controller's controllers (and the AWS layer beneath them),
	// lifeboat-webhook's server (handlers, audit). checkLinked keeps this true.
	_ "github.com/lifeboat-k8s/lifeboat/pkg/controllers"
	_ "github.com/lifeboat-k8s/lifeboat/webhooks/server"
)

// ruleGroups is the spec of the rendered PrometheusRule: a Prometheus rule file.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// renderRules renders the chart's PrometheusRule and returns its spec as a rule file.
func renderRules(t testing.TB) ([]byte, ruleGroups) {
	t.Helper()
	objs := render(t, "--set", "prometheusRule.enabled=true", "--show-only", "templates/monitoring/prometheusrule.yaml")
	if len(objs) != 1 || objs[0].GetKind() != "PrometheusRule" {
		t.Fatalf("want one PrometheusRule, got %d objects", len(objs))
	}
	spec, err := yaml.Marshal(objs[0].Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var g ruleGroups
	if err := yaml.Unmarshal(spec, &g); err != nil {
		t.Fatal(err)
	}
	return spec, g
}

func alertNames(g ruleGroups) []string {
	var names []string
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

// TestAlertRules: promtool accepts the rendered rules and their unit tests pass.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	spec, _ := renderRules(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "check", "rules", filepath.Join(dir, "rules.yaml"))
	run(t, promtool, "test", "rules", filepath.Join(dir, "alerts_test.yaml"))
}

// TestAlertTestsCoverEveryAlert: every alert has a promtool case that fires and one that stays
// silent, and every case names an alert that exists.
func TestAlertTestsCoverEveryAlert(t *testing.T) {
	_, g := renderRules(t)
	b, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tests []struct {
			Name  string `json:"name"`
			Cases []struct {
				Alertname string            `json:"alertname"`
				ExpAlerts []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	firing, silent := map[string]bool{}, map[string]bool{}
	alerts := map[string]bool{}
	for _, a := range alertNames(g) {
		alerts[a] = true
	}
	for _, tc := range file.Tests {
		for _, c := range tc.Cases {
			if !alerts[c.Alertname] {
				t.Errorf("test %q names alert %s, which the chart does not define", tc.Name, c.Alertname)
			}
			if len(c.ExpAlerts) > 0 {
				firing[c.Alertname] = true
			} else {
				silent[c.Alertname] = true
			}
		}
	}
	for a := range alerts {
		if !firing[a] {
			t.Errorf("alert %s has no promtool case in which it fires", a)
		}
		if !silent[a] {
			t.Errorf("alert %s has no promtool case in which it stays silent", a)
		}
	}
}

// Lifeboat's metrics are all named lifeboat_*; histogram series add a suffix.
var (
	metricName      = regexp.MustCompile(`\blifeboat_[a-z0-9_]+\b`)
	histogramSuffix = regexp.MustCompile(`_(bucket|sum|count)$`)
)

// TestMetricsExist: every lifeboat_* metric the alerts and the dashboard query is registered by
// the binaries. A Vec with no children is absent from Gather, so the test asks the registry
// itself: registering a collector under a name the registry already holds fails.
func TestMetricsExist(t *testing.T) {
	checkLinked(t)
	_, g := renderRules(t)
	used := map[string][]string{}
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				used[m] = append(used[m], "alert "+r.Alert)
			}
		}
	}
	dashboard, err := os.ReadFile(filepath.Join(chartDir(t), "files", "dashboards", "lifeboat.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				used[m] = append(used[m], "panel "+p.Title)
			}
		}
	}
	for _, v := range d.Templating.List {
		for _, m := range metricName.FindAllString(v.Definition, -1) {
			used[m] = append(used[m], "dashboard variable")
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d metric names in the rules and the dashboard; is the extraction broken?", len(used))
	}
	names := make([]string, 0, len(used))
	for m := range used {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		if registered(m) {
			continue
		}
		if base := histogramSuffix.ReplaceAllString(m, ""); base != m && registered(base) {
			continue
		}
		t.Errorf("metric %s (used by %s) is not registered by any Lifeboat binary", m, strings.Join(uniq(used[m]), ", "))
	}
}

// registered reports whether the controller-runtime registry (which both lifeboat-webhook and
// lifeboat-controller serve on /metrics) holds a metric of that name.
func registered(name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe of TestMetricsExist"})
	err := crmetrics.Registry.Register(probe)
	if err == nil {
		crmetrics.Registry.Unregister(probe)
		return false
	}
	var already prometheus.AlreadyRegisteredError
	return errors.As(err, &already) || strings.Contains(err.Error(), "previously registered")
}

// checkLinked: the packages this test imports for their registrations are linked by the
// binaries, so a metric found here is one the binaries serve. (The controller's AWS metrics
// are registered by packages pkg/controllers imports, as cmd/lifeboat-controller does.)
func checkLinked(t *testing.T) {
	t.Helper()
	want := map[string][]string{
		"github.com/lifeboat-k8s/lifeboat/cmd/lifeboat-controller": {"pkg/controllers"},
		"github.com/lifeboat-k8s/lifeboat/cmd/lifeboat-webhook":    {"webhooks/server"},
	}
	for cmd, pkgs := range want {
		out := run(t, "go", "list", "-deps", cmd)
		deps := map[string]bool{}
		for _, l := range strings.Split(string(out), "\n") {
			deps[strings.TrimPrefix(l, "github.com/lifeboat-k8s/lifeboat/")] = true
		}
		for _, p := range pkgs {
			if !deps[p] {
				t.Errorf("%s does not link %s, whose metrics this test counts as the binary's", cmd, p)
			}
		}
	}
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
