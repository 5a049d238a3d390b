// Package scheme registers Lifeboat's plugin args with kube-scheduler's config scheme.
// Import it (for side effects) in anything that decodes a KubeSchedulerConfiguration carrying
// them: the lifeboat-scheduler binary and tests.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/lifeboat-k8s/lifeboat/plugins/apis/config"
	configv1 "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/v1"
)

// Scheme is kube-scheduler's own config scheme, extended with Lifeboat's args.
var Scheme = kubeschedulerscheme.Scheme

func init() {
	// kube-scheduler's scheme was built in its package init, possibly before Lifeboat's types
	// joined its scheme builders; add them explicitly (registration is idempotent).
	AddToScheme(Scheme)
}

// AddToScheme registers the internal and v1 args, defaults and conversions.
func AddToScheme(s *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(s))
	utilruntime.Must(configv1.AddToScheme(s))
}

// ArgsToInternal turns the args a plugin factory receives into the internal type: internal
// args pass through; versioned (v1) args are defaulted and converted; nil (a framework built
// without kube-scheduler's config defaulting, e.g. in tests) becomes the defaulted empty v1
// object emptyV1.
func ArgsToInternal(obj, emptyV1 runtime.Object) (runtime.Object, error) {
	if obj == nil {
		obj = emptyV1
	}
	if _, unknown := obj.(*runtime.Unknown); unknown {
		return nil, fmt.Errorf("args were not decoded: is %s imported?", "github.com/lifeboat-k8s/lifeboat/plugins/apis/config/scheme")
	}
	gvks, _, err := Scheme.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	for _, gvk := range gvks {
		if gvk.GroupVersion() == config.SchemeGroupVersion {
			return obj, nil
		}
	}
	versioned := obj.DeepCopyObject()
	Scheme.Default(versioned)
	return Scheme.ConvertToVersion(versioned, config.SchemeGroupVersion)
}
