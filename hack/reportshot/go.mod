// The report check's own module: the product's module graph carries no browser automation
// library (see main.go).
module github.com/lifeboat-k8s/lifeboat/hack/reportshot

go 1.26.9

require github.com/chromedp/chromedp v0.23.0

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)
