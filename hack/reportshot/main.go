// Command reportshot checks a simulation's HTML report the way a reader sees it: it opens the
// page in headless Chromium (through the DevTools protocol), checks the layout — the outcome
// first, then the HTML table of figures, then the charts; every chart drawn with a size; no
// sideways scrolling at a laptop's width — and saves a full-page screenshot, in which it
// checks that the charts' lines are painted in the modes' colours.
//
//	make report-check [REPORT=.lifeboat/demo/report.html]
//
// It is its own module (hack/reportshot/go.mod) so that the product's module graph carries no
// browser automation library. Chromium: `apt-get install chromium` (Debian), or CHROMIUM=path.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// layout is what the page's own geometry says, read in the browser.
type layout struct {
	Headings     []string  `json:"headings"`
	OutcomeTop   float64   `json:"outcomeTop"`
	OutcomeItems int       `json:"outcomeItems"`
	TableTop     float64   `json:"tableTop"`
	TableRows    int       `json:"tableRows"`
	ChartTops    []float64 `json:"chartTops"`
	ChartSizes   []float64 `json:"chartSizes"`
	ScrollWidth  float64   `json:"scrollWidth"`
	InnerWidth   float64   `json:"innerWidth"`
	Height       float64   `json:"height"`
}

const readLayout = `(() => {
  const top = e => e ? e.getBoundingClientRect().top + window.scrollY : -1;
  const h2 = [...document.querySelectorAll('h2')];
  const outcome = h2.find(h => h.textContent.trim() === 'Outcome');
  const table = document.querySelector('table');
  const charts = [...document.querySelectorAll('svg')];
  return {
    headings: h2.map(h => h.textContent.trim()),
    outcomeTop: top(outcome),
    outcomeItems: outcome && outcome.nextElementSibling ? outcome.nextElementSibling.querySelectorAll('li').length : 0,
    tableTop: top(table),
    tableRows: table ? table.querySelectorAll('tr').length : 0,
    chartTops: charts.map(top),
    chartSizes: charts.map(c => { const r = c.getBoundingClientRect(); return r.width * r.height; }),
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    height: document.documentElement.scrollHeight,
  };
})()`

func main() {
	report := flag.String("report", ".lifeboat/demo/report.html", "the report to check")
	out := flag.String("screenshot", "", "where to write the full-page PNG (default: next to the report, report.png)")
	width := flag.Int("width", 1280, "window width in CSS pixels")
	flag.Parse()
	if err := run(*report, *out, *width); err != nil {
		fmt.Fprintln(os.Stderr, "reportshot:", err)
		os.Exit(1)
	}
}

func run(report, out string, width int) error {
	abs, err := filepath.Abs(report)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("%s: %w (run `make demo` first, or pass REPORT=path/to/report.html)", report, err)
	}
	if out == "" {
		out = strings.TrimSuffix(abs, filepath.Ext(abs)) + ".png"
	}
	browser, err := chromium()
	if err != nil {
		return err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.WindowSize(width, 900), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	if _, err := chromedp.Run(ctx, chromedp.Navigate("file://"+abs)); err != nil {
		return fmt.Errorf("open %s in %s: %w", report, browser, err)
	}
	l, err := chromedp.Run(ctx, chromedp.Evaluate[layout](readLayout))
	if err != nil {
		return fmt.Errorf("read the layout of %s: %w", report, err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("screenshot %s: %w", report, err)
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		return err
	}
	problems := checkLayout(l)
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		return fmt.Errorf("decode the screenshot: %w", err)
	}
	problems = append(problems, checkPainted(img, l)...)
	fmt.Printf("reportshot: %s at %d px: %d outcome lines, a table of %d rows, %d charts; page %.0f px high; screenshot %s\n",
		report, width, l.OutcomeItems, l.TableRows, len(l.ChartTops), l.Height, out)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println("reportshot: the outcome comes first, then the table, then the charts; nothing scrolls sideways; the charts are painted")
	return nil
}

// checkLayout: the order a reader meets the report in, and nothing wider than the window.
func checkLayout(l layout) []string {
	var p []string
	switch {
	case l.OutcomeTop < 0:
		p = append(p, fmt.Sprintf("no Outcome heading (headings: %q)", l.Headings))
	case len(l.Headings) == 0 || l.Headings[0] != "Outcome":
		p = append(p, fmt.Sprintf("the first section is %q, not the outcome", l.Headings[0]))
	case l.OutcomeItems == 0:
		p = append(p, "the Outcome section says nothing")
	case l.OutcomeTop > 600:
		p = append(p, fmt.Sprintf("the outcome starts %.0f px down: not in the first screen", l.OutcomeTop))
	}
	if l.TableTop < 0 || l.TableRows < 2 {
		p = append(p, "no HTML table of figures")
	} else if l.TableTop < l.OutcomeTop {
		p = append(p, "the table comes before the outcome")
	}
	if len(l.ChartTops) == 0 {
		p = append(p, "no charts")
	}
	for i, top := range l.ChartTops {
		if top < l.TableTop {
			p = append(p, fmt.Sprintf("chart %d is above the table", i+1))
		}
		if l.ChartSizes[i] <= 0 {
			p = append(p, fmt.Sprintf("chart %d has no size", i+1))
		}
	}
	if l.ScrollWidth > l.InnerWidth {
		p = append(p, fmt.Sprintf("the page is %.0f px wide in a %.0f px window: it scrolls sideways", l.ScrollWidth, l.InnerWidth))
	}
	return p
}

// The modes' line colours (pkg/sim/report modeColours): baseline and lifeboat.
var modeColours = map[string][3]uint8{"baseline": {0xc0, 0x39, 0x2b}, "lifeboat": {0x24, 0x71, 0xa3}}

// checkPainted: below the first chart the screenshot holds the modes' line colours — the
// charts were drawn, not just laid out.
func checkPainted(img image.Image, l layout) []string {
	if len(l.ChartTops) == 0 {
		return nil
	}
	b := img.Bounds()
	scale := float64(b.Dy()) / l.Height // device pixels per CSS pixel
	from := b.Min.Y + int(l.ChartTops[0]*scale)
	count := map[string]int{}
	for y := from; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			for mode, c := range modeColours {
				if near(r>>8, c[0]) && near(g>>8, c[1]) && near(bl>>8, c[2]) {
					count[mode]++
				}
			}
		}
	}
	var p []string
	for mode := range modeColours {
		if count[mode] < 200 {
			p = append(p, fmt.Sprintf("the charts show almost no %s line (%d pixels of its colour)", mode, count[mode]))
		}
	}
	return p
}

func near(v uint32, c uint8) bool { d := int(v) - int(c); return d > -24 && d < 24 }

// chromium finds the browser: CHROMIUM, or one on PATH.
func chromium() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found: install it (Debian: apt-get install chromium) or set CHROMIUM=/path/to/chrome")
}
