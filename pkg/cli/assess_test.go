package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/lifeboat-k8s/lifeboat/pkg/assess"
	"github.com/lifeboat-k8s/lifeboat/pkg/assess/assesstest"
	"github.com/lifeboat-k8s/lifeboat/pkg/sim/scenario"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var fixedNow = func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }

// fleetClients serves the fixture fleet from fake clientsets: what one List per kind returns.
func fleetClients(t *testing.T) (*fake.Clientset, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	s := assesstest.NewFleet().Snapshot()
	var objs []runtime.Object
	for i := range s.Namespaces {
		objs = append(objs, &s.Namespaces[i])
	}
	for i := range s.Nodes {
		objs = append(objs, &s.Nodes[i])
	}
	for i := range s.Pods {
		objs = append(objs, &s.Pods[i])
	}
	for i := range s.Deployments {
		objs = append(objs, &s.Deployments[i])
	}
	for i := range s.ReplicaSets {
		objs = append(objs, &s.ReplicaSets[i])
	}
	for i := range s.StatefulSets {
		objs = append(objs, &s.StatefulSets[i])
	}
	for i := range s.Jobs {
		objs = append(objs, &s.Jobs[i])
	}
	for i := range s.CronJobs {
		objs = append(objs, &s.CronJobs[i])
	}
	for i := range s.PDBs {
		objs = append(objs, &s.PDBs[i])
	}
	for i := range s.PVCs {
		objs = append(objs, &s.PVCs[i])
	}
	for i := range s.PVs {
		objs = append(objs, &s.PVs[i])
	}
	for i := range s.StorageClasses {
		objs = append(objs, &s.StorageClasses[i])
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		nodePoolGVR: "NodePoolList", rolloutGVR: "RolloutList", warmPoolGVR: "WarmPoolList"}, &s.NodePools[0])
	return fake.NewClientset(objs...), dyn
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./pkg/cli -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update after checking):\n--- got ---\n%s", path, got)
	}
}

func TestAssessTable(t *testing.T) {
	client, dyn := fleetClients(t)
	var out bytes.Buffer
	if err := runAssess(context.Background(), &out, client, dyn, assessOptions{output: "table", spotDiscount: -1, now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	golden(t, "assess-table.golden", out.String())
}

// TestAssessFormatsAgree: table, JSON and HTML carry the same figures.
func TestAssessFormatsAgree(t *testing.T) {
	client, dyn := fleetClients(t)
	var js, table, page bytes.Buffer
	for _, f := range []struct {
		format string
		out    *bytes.Buffer
	}{{"json", &js}, {"table", &table}, {"html", &page}} {
		if err := runAssess(context.Background(), f.out, client, dyn, assessOptions{output: f.format, spotDiscount: -1, now: fixedNow}); err != nil {
			t.Fatalf("-o %s: %v", f.format, err)
		}
	}
	var rep assess.Report
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.SchemaVersion != assess.SchemaVersion || rep.GeneratedAt != "2026-12-01T12:00:00Z" || len(rep.Workloads) != 22 {
		t.Fatalf("json: %s %s %d workloads", rep.SchemaVersion, rep.GeneratedAt, len(rep.Workloads))
	}
	html := page.String()
	if !strings.HasPrefix(html, "<!doctype html>") || !strings.Contains(html, "<svg") || strings.Contains(html, "<script") ||
		strings.Contains(html, "http://") && !strings.Contains(html, `xmlns="http://www.w3.org/2000/svg"`) {
		t.Errorf("html is not a self-contained page with an SVG chart")
	}
	for _, w := range rep.Workloads {
		if !strings.Contains(table.String(), w.Ref()) || !strings.Contains(html, w.Namespace+"/"+strings.ToLower(w.Kind)+"/"+w.Name) {
			t.Errorf("%s missing from table or html", w.Ref())
		}
	}
	if !strings.Contains(table.String(), rep.Curve.Headline) || !strings.Contains(html, rep.Curve.Headline) {
		t.Errorf("curve headline %q missing", rep.Curve.Headline)
	}
}

func TestAssessScenarioOutAndFlags(t *testing.T) {
	client, dyn := fleetClients(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "fleet.yaml")
	var out, errOut bytes.Buffer
	if err := runAssess(context.Background(), &out, client, dyn, assessOptions{output: "json", spotDiscount: 0.7, scenarioOut: file, scale: 0.5, now: fixedNow, stderr: &errOut}); err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Load(file)
	if err != nil {
		t.Fatalf("--scenario-out does not validate: %v", err)
	}
	if s.Cluster.SpotDiscount != 0.3 {
		t.Errorf("--spot-discount 0.7 → scenario Spot price fraction %v, want 0.3", s.Cluster.SpotDiscount)
	}
	if !strings.Contains(errOut.String(), "lifeboat sim run --scenario "+file) {
		t.Errorf("stderr %q", errOut.String())
	}
	var rep assess.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Prices.SpotDiscount != 0.7 {
		t.Errorf("report prices %+v (%v)", rep.Prices, err)
	}
	prices := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(prices, []byte(`{"source": "negotiated", "onDemandHourly": {"x9.weird": 0.5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runAssess(context.Background(), &out, client, dyn, assessOptions{output: "json", spotDiscount: -1, pricesFile: prices, now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), `"unknown-instance-type"`) || !strings.Contains(out.String(), "negotiated over") {
		t.Errorf("--prices did not price x9.weird")
	}
	for _, bad := range []assessOptions{
		{output: "yaml", spotDiscount: -1},
		{output: "table", spotDiscount: 1.2},
		{output: "table", spotDiscount: -1, scenarioOut: file, scale: 3},
		{output: "table", spotDiscount: -1, pricesFile: filepath.Join(dir, "missing.json")},
	} {
		if err := runAssess(context.Background(), &out, client, dyn, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestAssessCommandFlags(t *testing.T) {
	cmd := NewCommand()
	assessCmd, _, err := cmd.Find([]string{"assess"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kubeconfig", "context", "namespace", "all-namespaces", "output", "prices", "spot-discount", "scenario-out", "scale", "warm-pool-type"} {
		if assessCmd.Flags().Lookup(f) == nil {
			t.Errorf("assess has no --%s", f)
		}
	}
	if assessCmd.Flags().ShorthandLookup("A") == nil || assessCmd.Flags().ShorthandLookup("n") == nil || assessCmd.Flags().ShorthandLookup("o") == nil {
		t.Error("assess lacks -A, -n or -o")
	}
	cmd.SetArgs([]string{"assess", "-n", "shop", "-A", "--kubeconfig", "/nonexistent"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("-n with -A: %v", err)
	}
}
