package sim

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/lifeboat-k8s/lifeboat/pkg/localcluster"
)

// Clients are what the market and the observers need: the simulation runs them against its own
// control plane, `lifeboat sim interrupt` against one started by `lifeboat sim up`.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// ClientsOf returns admin clients of a local control plane.
func ClientsOf(c *localcluster.Cluster) Clients {
	return Clients{Kube: c.Client(), Dynamic: c.Dynamic()}
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
