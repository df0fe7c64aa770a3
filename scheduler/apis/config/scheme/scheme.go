// Package scheme registers the args of Gantry's kube-scheduler plugins in
// kube-scheduler's configuration scheme and in the scheme kube-scheduler
// defaults and converts plugin args with; importing it is what makes a
// KubeSchedulerConfiguration's pluginConfig for Gantry's plugins typed,
// strictly decoded and defaulted, as upstream's plugin args are.
package scheme

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedconfigv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
	configv1 "github.com/gantry-dev/gantry/scheduler/apis/config/v1"
)

func init() {
	AddToScheme(schedscheme.Scheme)
	AddToScheme(schedconfigv1.GetPluginArgConversionScheme())
}

// AddToScheme adds the internal and versioned args types, their defaults
// and conversions to s.
func AddToScheme(s *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(s))
	utilruntime.Must(configv1.AddToScheme(s))
}

// DecodeInto sets into, a pointer to an internal args type, from a plugin's
// args as the framework hands them: that type already (the usual case), nil
// (defaults), or raw JSON or YAML in a runtime.Unknown (strictly decoded as
// the versioned kind, then defaulted and converted).
func DecodeInto(obj runtime.Object, into runtime.Object) error {
	kinds, _, err := schedscheme.Scheme.ObjectKinds(into)
	if err != nil {
		return err
	}
	gvk := configv1.SchemeGroupVersion.WithKind(kinds[0].Kind)
	switch o := obj.(type) {
	case nil:
		ext, err := schedscheme.Scheme.New(gvk)
		if err != nil {
			return err
		}
		schedscheme.Scheme.Default(ext)
		return schedscheme.Scheme.Convert(ext, into, nil)
	case *runtime.Unknown:
		decoder := schedscheme.Codecs.UniversalDecoder(config.SchemeGroupVersion)
		got, _, err := decoder.Decode(o.Raw, &gvk, nil)
		if err != nil {
			return err
		}
		return set(into, got)
	default:
		return set(into, obj)
	}
}

// DecodePluginArgs is DecodeInto followed by validate, with errors that
// name the plugin: what every Gantry plugin's New does with its args.
func DecodePluginArgs[T runtime.Object](plugin string, obj runtime.Object, into T, validate func(*field.Path, T) error) (T, error) {
	if err := DecodeInto(obj, into); err != nil {
		return into, fmt.Errorf("decoding %s args: %w", plugin, err)
	}
	if err := validate(field.NewPath("pluginConfig", plugin, "args"), into); err != nil {
		return into, fmt.Errorf("%s args: %w", plugin, err)
	}
	return into, nil
}

func set(into, from runtime.Object) error {
	if reflect.TypeOf(into) != reflect.TypeOf(from) {
		return fmt.Errorf("got args of type %T, want %T", from, into)
	}
	reflect.ValueOf(into).Elem().Set(reflect.ValueOf(from).Elem())
	return nil
}
