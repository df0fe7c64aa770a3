package frameworkext

import (
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	kjson "sigs.k8s.io/json"
)

// DecodeArgs decodes a plugin's args from the scheduler configuration into
// into, refusing unknown fields: a misspelt option must not silently keep its
// default. A nil obj leaves into as it is.
func DecodeArgs(obj runtime.Object, into any) error {
	switch o := obj.(type) {
	case nil:
		return nil
	case *runtime.Unknown:
		strict, err := kjson.UnmarshalStrict(o.Raw, into)
		if err != nil {
			return err
		}
		return errors.Join(strict...)
	}
	return frameworkruntime.DecodeInto(obj, into)
}
