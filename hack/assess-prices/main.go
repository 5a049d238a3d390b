// Command assess-prices regenerates pkg/assess/ec2prices.json, the EC2 On-Demand price table
// that `lifeboat assess` embeds.
//
// No AWS price endpoint is reachable from the build machines (only the Go module proxy), so
// the source is the price list Karpenter's AWS provider ships and regenerates from the AWS
// Pricing API with each release (pkg/providers/pricing/zz_generated.pricing_aws.go). The
// generator parses that Go file as data (go/parser: it does not import the module, so
// Lifeboat's go.mod does not grow) and records the module version and the file's own
// "generated at" date. Run it from the repository root:
//
//	go run ./hack/assess-prices                       # the newest provider release
//	go run ./hack/assess-prices -version v1.15.2      # a given release
//
// Spot prices are not in that file (Karpenter fetches them live with DescribeSpotPriceHistory),
// so the table carries one default Spot discount; `lifeboat assess --prices FILE` can supply
// per-type Spot prices and `--spot-discount` overrides the default.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

const (
	module     = "github.com/aws/karpenter-provider-aws"
	pricesFile = "pkg/providers/pricing/zz_generated.pricing_aws.go"
	// defaultSpotDiscount matches the simulation's default (Spot at 35 % of On-Demand, the
	// long-run average AWS's Spot Instance Advisor shows for general-purpose types).
	defaultSpotDiscount = 0.65
)

// table is the schema of pkg/assess/ec2prices.json (pkg/assess.PriceTable reads it).
type table struct {
	Source       string             `json:"source"`
	Date         string             `json:"date"`
	Region       string             `json:"region"`
	Currency     string             `json:"currency"`
	SpotDiscount float64            `json:"spotDiscount"`
	Note         string             `json:"note"`
	OnDemand     map[string]float64 `json:"onDemandHourly"`
}

func main() {
	version := flag.String("version", "latest", "karpenter-provider-aws module version")
	region := flag.String("region", "us-east-1", "region to extract")
	out := flag.String("out", "pkg/assess/ec2prices.json", "output file")
	flag.Parse()

	dir, resolved, err := download(*version)
	if err != nil {
		log.Fatal(err)
	}
	src := filepath.Join(dir, pricesFile)
	prices, generatedAt, err := parse(src, *region)
	if err != nil {
		log.Fatal(err)
	}
	t := table{
		Source:       fmt.Sprintf("%s@%s %s (Karpenter's copy of the AWS Pricing API, Linux, shared tenancy)", module, resolved, pricesFile),
		Date:         generatedAt,
		Region:       *region,
		Currency:     "USD",
		SpotDiscount: defaultSpotDiscount,
		Note:         "On-Demand USD per hour. Spot prices vary by zone and hour and are not in the source: spotDiscount is the default fraction saved on Spot; override per type with --prices or globally with --spot-discount.",
		OnDemand:     prices,
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d instance types, %s, from %s@%s\n", *out, len(prices), generatedAt, module, resolved)
}

// download fetches the module through the Go module proxy into the module cache.
func download(version string) (dir, resolved string, err error) {
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = os.TempDir() // outside the repository: go.mod is not touched
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var m struct{ Dir, Version, Error string }
	if err := json.Unmarshal(b, &m); err != nil {
		return "", "", err
	}
	if m.Error != "" {
		return "", "", fmt.Errorf("go mod download: %s", m.Error)
	}
	return m.Dir, m.Version, nil
}

var generatedRE = regexp.MustCompile(`generated at (\S+) for`)

// parse reads the region's map literal: map[string]map[ec2types.InstanceType]float64{"region": {"type": price, ...}}.
func parse(path, region string) (map[string]float64, string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		return nil, "", err
	}
	date := ""
	for _, cg := range f.Comments {
		if m := generatedRE.FindStringSubmatch(cg.Text()); m != nil {
			date = m[1]
		}
	}
	if date == "" {
		return nil, "", fmt.Errorf("%s: no \"generated at\" comment", path)
	}
	prices := map[string]float64{}
	ast.Inspect(f, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		key, ok := kv.Key.(*ast.BasicLit)
		if !ok || key.Kind != token.STRING {
			return true
		}
		if name, _ := strconv.Unquote(key.Value); name != region {
			return true
		}
		inner, ok := kv.Value.(*ast.CompositeLit)
		if !ok {
			return false
		}
		for _, e := range inner.Elts {
			p, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			k, ok1 := p.Key.(*ast.BasicLit)
			v, ok2 := p.Value.(*ast.BasicLit)
			if !ok1 || !ok2 {
				continue
			}
			name, err1 := strconv.Unquote(k.Value)
			price, err2 := strconv.ParseFloat(v.Value, 64)
			if err1 == nil && err2 == nil && price > 0 {
				prices[name] = price
			}
		}
		return false
	})
	if len(prices) == 0 {
		return nil, "", fmt.Errorf("%s: no prices for region %s", path, region)
	}
	return prices, date, nil
}
