// Package bootstrap is the start-up that the mains of Gantry's controller
// binaries (gantry-provisioner, gantry-webhook) share: the --kubeconfig
// and klog flags, the rest config, a context that ends on SIGINT or SIGTERM
// and carries klog's logger, and the error exit named after the program.
// Each binary's own flags live on its options type (AddFlags), so that a
// main only parses flags and runs.
package bootstrap

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Options are the flags every controller binary has besides its own.
type Options struct {
	// Kubeconfig is the kubeconfig file of the cluster; "" uses the
	// in-cluster configuration.
	Kubeconfig string
}

// AddFlags registers --kubeconfig and klog's flags (-v, --vmodule, ...) in
// fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster (default: in-cluster)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
}

// RESTConfig is the configuration of the client to the cluster.
func (o *Options) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
}

// SignalContext is a context that ends on SIGINT or SIGTERM (or when stop
// is called) and carries klog's logger.
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return klog.NewContext(ctx, klog.Background()), stop
}

// Main is a controller binary's main: it adds the shared flags to fs (which
// holds the binary's own), parses the command line into fs, and calls run
// with the rest config and SignalContext. A flag error is handled as fs's
// error handling says (pflag.CommandLine exits); any other error is printed
// after the program's name and exits with status 1.
func Main(name string, fs *pflag.FlagSet, run func(ctx context.Context, cfg *rest.Config) error) {
	var o Options
	o.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		exit(name, err)
	}
	cfg, err := o.RESTConfig()
	if err != nil {
		exit(name, err)
	}
	ctx, stop := SignalContext()
	defer stop()
	if err := run(ctx, cfg); err != nil {
		exit(name, err)
	}
}

func exit(name string, err error) {
	fmt.Fprintln(os.Stderr, name+":", err)
	os.Exit(1)
}
