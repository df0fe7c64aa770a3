package app

import (
	"github.com/spf13/cobra"

	upstream "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// Plugins returns the registry options for every Gantry scheduler plugin.
// Tests and benchmarks (scheduler_perf) use the same list as the binary, so
// what is measured is what ships.
func Plugins() []upstream.Option {
	return nil
}

// NewSchedulerCommand returns kube-scheduler with Gantry's plugins registered.
func NewSchedulerCommand() *cobra.Command {
	cmd := upstream.NewSchedulerCommand(Plugins()...)
	cmd.Short = "Gantry's kube-scheduler: upstream kube-scheduler with Gantry's out-of-tree plugins"
	return cmd
}
