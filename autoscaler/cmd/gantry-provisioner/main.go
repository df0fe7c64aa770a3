// Command gantry-provisioner serves ProvisioningRequests
// (autoscaling.x-k8s.io/v1) of check-capacity and atomic scale-up classes:
// it simulates their pods with the cluster scheduler's filters, adds nodes
// all at once through a node-group provider when needed, and books the
// capacity with Reservations that Gantry's kube-scheduler honours.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/autoscaler/app"
)

func main() {
	o := app.Options{}
	kubeconfig := pflag.String("kubeconfig", "", "kubeconfig of the cluster (default: in-cluster)")
	pflag.StringVar(&o.SchedulerConfig, "scheduler-config", "", "the cluster scheduler's KubeSchedulerConfiguration file, whose profile's filters the simulation runs (default: kube-scheduler's defaults)")
	pflag.StringVar(&o.SchedulerName, "scheduler-name", "default-scheduler", "the profile of --scheduler-config to simulate")
	pflag.BoolVar(&o.LeaderElect, "leader-elect", true, "run as one of several replicas, one of them active")
	pflag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "kube-system", "namespace of the leader election lease")
	pflag.StringVar(&o.MetricsAddress, "metrics-bind-address", ":8082", "address of /metrics (\"0\" off)")
	pflag.StringVar(&o.HealthAddress, "health-probe-bind-address", ":8083", "address of /healthz and /readyz (\"0\" off)")
	pflag.Float32Var(&o.QPS, "kube-api-qps", 100, "client QPS to kube-apiserver (bookings are one create per pod)")
	pflag.IntVar(&o.Burst, "kube-api-burst", 200, "client burst to kube-apiserver")
	pflag.DurationVar(&o.PlacementTimeout, "booking-placement-timeout", 30*time.Second, "how long a booking's reservations may stay unplaced before the attempt is retried")
	pflag.StringVar(&o.NodeGroupProvider, "node-group-provider", "", "where atomic scale-ups add nodes: kwok or clusterapi (empty: nowhere; atomic classes book existing capacity only)")
	pflag.StringVar(&o.NodeGroupConfig, "node-group-config", "", "the node-group provider's configuration file")
	pflag.DurationVar(&o.ScaleDownUnneededTime, "scale-down-unneeded-time", 10*time.Minute, "how long a node the provisioner created must be empty and unbooked before it is removed (0: never)")
	pflag.DurationVar(&o.ScaleDownInterval, "scale-down-interval", 10*time.Second, "how often scale-down looks at the nodes")
	klog.InitFlags(nil)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gantry-provisioner:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	mgr, err := app.New(ctx, cfg, o)
	if err == nil {
		err = mgr.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gantry-provisioner:", err)
		os.Exit(1)
	}
}
