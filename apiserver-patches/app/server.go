package app

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/admission"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/flagz"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	upstream "k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

func init() {
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// AdmissionPlugin describes an admission plugin that Gantry compiles into
// kube-apiserver.
type AdmissionPlugin struct {
	// Name is the plugin name used by --enable-admission-plugins.
	Name string
	// Factory builds the plugin from its admission configuration.
	Factory admission.Factory
	// Before names the upstream plugin this one runs ahead of in the
	// recommended order. Empty appends the plugin at the end.
	Before string
	// DefaultOff leaves the plugin disabled unless it is enabled by flag.
	DefaultOff bool
}

// Option customizes the server options before flags are parsed.
type Option func(*options.ServerRunOptions) error

// WithAdmissionPlugin registers p and places it in the recommended plugin
// order, so it is enabled by default (unless p.DefaultOff) exactly as upstream
// plugins are.
func WithAdmissionPlugin(p AdmissionPlugin) Option {
	return func(s *options.ServerRunOptions) error {
		if p.Name == "" || p.Factory == nil {
			return fmt.Errorf("admission plugin needs a name and a factory")
		}
		generic := s.Admission.GenericAdmission
		if slices.Contains(generic.Plugins.Registered(), p.Name) {
			return fmt.Errorf("admission plugin %q is already registered", p.Name)
		}
		generic.Plugins.Register(p.Name, p.Factory)
		order := generic.RecommendedPluginOrder
		at := len(order)
		if p.Before != "" {
			at = slices.Index(order, p.Before)
			if at < 0 {
				return fmt.Errorf("admission plugin %q: %q is not in the recommended order", p.Name, p.Before)
			}
		}
		generic.RecommendedPluginOrder = slices.Insert(slices.Clone(order), at, p.Name)
		if p.DefaultOff {
			generic.DefaultOffPlugins.Insert(p.Name)
		}
		return nil
	}
}

// NewAPIServerCommand returns the kube-apiserver command with Gantry's options
// applied. Flags, logging, completion, validation and Run are upstream's.
func NewAPIServerCommand(opts ...Option) (*cobra.Command, error) {
	s := options.NewServerRunOptions()
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	ctx := genericapiserver.SetupSignalContext()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)

	cmd := &cobra.Command{
		Use:          "kube-apiserver",
		Short:        "Gantry's kube-apiserver: upstream kube-apiserver with Gantry admission plugins and patches",
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
				return err
			}
			// The loopback client must not log warnings the server issues to itself.
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(cmd.Flags())

			completed, err := s.Complete(ctx)
			if err != nil {
				return err
			}
			if errs := completed.Validate(); len(errs) != 0 {
				return utilerrors.NewAggregate(errs)
			}
			featureGate.(featuregate.MutableFeatureGate).AddMetrics()
			s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
			return upstream.Run(ctx, completed)
		},
		Args: cobra.NoArgs,
	}
	cmd.SetContext(ctx)

	namedFlagSets := s.Flags()
	s.Flagz = flagz.NamedFlagSetsReader{FlagSets: namedFlagSets}
	verflag.AddFlags(namedFlagSets.FlagSet("global"))
	globalflag.AddGlobalFlags(namedFlagSets.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range namedFlagSets.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, namedFlagSets, cols)
	return cmd, nil
}
