package app

import (
	upstream "k8s.io/kubernetes/cmd/kube-scheduler/app"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/plugins/asyncpreemption"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation"
)

// Registry returns Gantry's scheduler plugins by name, unwrapped.
func Registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		reservation.Name:     reservation.New,
		asyncpreemption.Name: asyncpreemption.New,
	}
}

// Plugins returns the registry options for every Gantry scheduler plugin,
// each factory wrapped by ext so that plugins get the extended handle.
// Tests and benchmarks (scheduler_perf) use the same list as the binary, so
// what is measured is what ships.
func Plugins(ext *frameworkext.Extender) []upstream.Option {
	var opts []upstream.Option
	for name, factory := range ext.Wrap(Registry()) {
		opts = append(opts, upstream.WithPlugin(name, factory))
	}
	return opts
}
