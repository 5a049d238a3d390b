// Package scheme registers Lifeboat's plugin args with kube-scheduler's config scheme.
// Import it (for side effects) in anything that decodes a KubeSchedulerConfiguration carrying
// them: the lifeboat-scheduler binary and tests.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// DecodeArgs is what every plugin factory does first: it turns obj into the internal args type
// T (see ArgsToInternal; emptyV1 is the v1 type's empty object) and validates it, with errors
// that name the plugin.
func DecodeArgs[T runtime.Object](plugin string, obj, emptyV1 runtime.Object, validate func(*field.Path, T) error) (T, error) {
	var zero T
	internal, err := ArgsToInternal(obj, emptyV1)
	if err != nil {
		return zero, fmt.Errorf("%s args: %w", plugin, err)
	}
	args, ok := internal.(T)
	if !ok {
		return zero, fmt.Errorf("%s args: want %T, got %T", plugin, zero, internal)
	}
	if err := validate(nil, args); err != nil {
		return zero, fmt.Errorf("invalid %s args: %w", plugin, err)
	}
	return args, nil
}
