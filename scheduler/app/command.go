package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/tools/cache"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	upstream "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// GantryOptions are the flags Gantry adds to kube-scheduler's.
type GantryOptions struct {
	// DebugScores is how many top nodes to log, with each score plugin's
	// weighted score, for every scheduled pod, at verbosity 2; 0 disables it,
	// and values above frameworkext.MaxDebugScores are clamped to it. It can
	// be changed at runtime with PUT /debug/flags/s when profiling is enabled.
	DebugScores int32
	// CRDSyncTimeout is how long the scheduler waits for the informers of
	// Gantry's custom resources before it schedules without the features that
	// need them (frameworkext.Extender.SetCRDSyncTimeout).
	CRDSyncTimeout time.Duration
}

// AddFlags registers the Gantry flags in fs.
func (o *GantryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Int32Var(&o.DebugScores, "debug-scores", o.DebugScores,
		fmt.Sprintf("Log at verbosity 2, for every scheduled pod, a table of the top N nodes (at most %d) with the total and each score plugin's weighted score (0 disables). Can be changed at runtime with PUT /debug/flags/s when profiling is enabled.", frameworkext.MaxDebugScores))
	fs.DurationVar(&o.CRDSyncTimeout, "crd-sync-timeout", o.CRDSyncTimeout,
		"How long to wait at start for the informers of Gantry's custom resources (e.g. Reservations). After it, pods are scheduled without the features that need them (the Reservation plugin holds nothing); the informers keep retrying and the features start once they sync.")
}

// NewSchedulerCommand returns Gantry's kube-scheduler: upstream's flags and
// configuration, Gantry's plugins, and the extension layer.
func NewSchedulerCommand() *cobra.Command {
	opts := options.NewOptions()
	gantryOpts := &GantryOptions{CRDSyncTimeout: frameworkext.DefaultCRDSyncTimeout}
	cmd := &cobra.Command{
		Use:   "kube-scheduler",
		Short: "Gantry's kube-scheduler: upstream kube-scheduler with Gantry's plugins and extension layer",
		Long: `Gantry's kube-scheduler is upstream kube-scheduler with Gantry's out-of-tree plugins
(Reservation, ...) and an extension layer that gives plugins phase hooks, REST services on the
secure port under /gantry/v1/, controllers run while leading, and score debugging (--debug-scores).`,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCommand(cmd, opts, gantryOpts)
		},
		Args: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if a != "" {
					return fmt.Errorf("%q does not take arguments, got %q", cmd.CommandPath(), args)
				}
			}
			return nil
		},
	}
	nfs := opts.Flags
	verflag.AddFlags(nfs.FlagSet("global"))
	globalflag.AddGlobalFlags(nfs.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	gantryOpts.AddFlags(nfs.FlagSet("gantry"))
	for _, fs := range nfs.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, *nfs, cols)
	return cmd
}

func runCommand(cmd *cobra.Command, opts *options.Options, gantryOpts *GantryOptions) error {
	verflag.PrintAndExitIfRequested()
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	cliflag.PrintFlags(cmd.Flags())
	if gantryOpts.DebugScores < 0 {
		return fmt.Errorf("--debug-scores must not be negative, got %d", gantryOpts.DebugScores)
	}
	if gantryOpts.CRDSyncTimeout <= 0 {
		return fmt.Errorf("--crd-sync-timeout must be positive, got %s", gantryOpts.CRDSyncTimeout)
	}
	// As upstream's command: the informers are named for their metrics. A
	// name is unique in a process, so only the command sets it.
	if opts.InformerName == nil {
		name, err := cache.NewInformerName("kube-scheduler")
		if err != nil {
			return err
		}
		opts.InformerName = name
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()

	ext := frameworkext.New()
	if set := ext.SetDebugScores(gantryOpts.DebugScores); set != gantryOpts.DebugScores {
		klog.FromContext(ctx).Info("--debug-scores clamped", "requested", gantryOpts.DebugScores, "set", set)
	}
	ext.SetCRDSyncTimeout(gantryOpts.CRDSyncTimeout)
	cc, sched, err := upstream.Setup(ctx, opts, Plugins(ext)...)
	if err != nil {
		return err
	}
	if err := ext.Attach(sched); err != nil {
		return fmt.Errorf("attaching Gantry's extension layer: %w", err)
	}
	fg.(featuregate.MutableFeatureGate).AddMetrics()
	opts.ComponentGlobalsRegistry.AddMetrics()
	klog.FromContext(ctx).Info("Gantry extension layer attached", "profiles", len(sched.Profiles))
	return Run(ctx, cc, sched, ext)
}
