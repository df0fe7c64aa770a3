package util

import (
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/gantry-dev/gantry/internal/kustomize"
)

// manifestCodecs decode what Gantry's manifests hold: client-go's kinds
// and CustomResourceDefinitions.
var manifestCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// Kustomize builds the kustomization in dir as `kubectl apply -k` would and
// decodes its objects into the types of client-go's scheme (and
// CustomResourceDefinitions), for tests of
// the manifests Gantry ships.
func Kustomize(dir string) ([]runtime.Object, error) {
	built, err := kustomize.Build(dir)
	if err != nil {
		return nil, err
	}
	objs := make([]runtime.Object, 0, len(built))
	for _, u := range built {
		data, err := json.Marshal(u.Object)
		if err != nil {
			return nil, err
		}
		obj, _, err := manifestCodecs.UniversalDeserializer().Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", dir, u.GetKind(), u.GetName(), err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// OfType returns the objects of objs that are a T, in order.
func OfType[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if o, ok := o.(T); ok {
			out = append(out, o)
		}
	}
	return out
}
