package component

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
)

// APIClient is the client-side rate limit of a binary's Kubernetes API client
// (--kube-api-qps, --kube-api-burst). Left unset, client-go allows 5 requests per second, far
// too few for a drain of many nodes: a binary states its own defaults.
type APIClient struct {
	QPS   float32
	Burst int
}

// AddFlags registers the flags; why says what the binary spends its requests on.
func (a *APIClient) AddFlags(fs *pflag.FlagSet, why string) {
	fs.Float32Var(&a.QPS, "kube-api-qps", a.QPS, "Client-side rate limit of Kubernetes API requests per second ("+why+").")
	fs.IntVar(&a.Burst, "kube-api-burst", a.Burst, "Burst of the Kubernetes API rate limit.")
}

// Validate reports a limit that is not positive.
func (a APIClient) Validate() error {
	if a.QPS <= 0 || a.Burst <= 0 {
		return fmt.Errorf("--kube-api-qps (%g) and --kube-api-burst (%d) must be positive", a.QPS, a.Burst)
	}
	return nil
}

// Apply sets the limit on cfg.
func (a APIClient) Apply(cfg *rest.Config) { cfg.QPS, cfg.Burst = a.QPS, a.Burst }
