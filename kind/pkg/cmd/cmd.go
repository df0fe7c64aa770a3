// Package cmd is the command line of Gantry's cluster program: `up` (the
// default), `down` and `status`, each a flag struct over a library call.
package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	// The runtimes this program ships.
	_ "github.com/gantry-dev/gantry/kind/pkg/runtime/kind"
	_ "github.com/gantry-dev/gantry/kind/pkg/runtime/local"
)

// Run executes the program with args and returns the error to report.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(stdout)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

func newRoot(out io.Writer) *cobra.Command {
	o := &cluster.Options{Out: out}
	up := &cobra.Command{
		Use:   "up",
		Short: "Create the cluster, or converge an existing one to the flags",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cluster.New(o)
			if err != nil {
				return err
			}
			return c.Up(cmd.Context())
		},
	}
	down := &cobra.Command{
		Use:   "down",
		Short: "Delete the cluster and everything made for it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cluster.New(o)
			if err != nil {
				return err
			}
			return c.Down(cmd.Context())
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Print whether the cluster exists and runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cluster.New(o)
			if err != nil {
				return err
			}
			_, err = c.Status(cmd.Context())
			return err
		},
	}
	var steps []string
	upgrade := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade a running kind cluster an earlier Gantry release made to this checkout's release, in place",
		Long: "upgrade moves the cluster's components one at a time, in docs/upgrade.md's order, to the images\n" +
			"`make images` built from this checkout: Gantry's CRDs, etcd, kube-apiserver, kube-controller-manager,\n" +
			"kube-scheduler, CoreDNS, then Gantry's Deployments. Nodes keep their kubelet. --step runs the named\n" +
			"steps alone (repeatable, still in that order); a step whose component runs this release already changes nothing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cluster.New(o)
			if err != nil {
				return err
			}
			return c.Upgrade(cmd.Context(), steps)
		},
	}
	upgrade.Flags().StringArrayVar(&steps, "step", nil, "run only this upgrade step (repeatable); a name the runtime does not know is refused with the list of steps")
	root := &cobra.Command{
		Use:   "gantry-cluster",
		Short: "Bring Gantry's development and e2e cluster up and down",
		Long: "gantry-cluster runs a Kubernetes control plane built from Gantry's sources, with kwok fake nodes,\n" +
			"and installs Gantry's CRDs. Without a subcommand it runs `up`.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          up.RunE,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.Name, "name", cluster.DefaultName, "cluster name")
	pf.StringVar(&o.Runtime, "runtime", "local", "how the control plane runs: "+strings.Join(cluster.Runtimes(), " or "))
	pf.StringVar(&o.Root, "root", "", "repository checkout (default: found from the working directory)")
	pf.StringVar(&o.BinDir, "bin-dir", "", "directory of the built binaries (default <root>/_output/bin)")
	pf.StringVar(&o.WorkDir, "workdir", "", "directory for the cluster's state and logs (default <root>/_output/cluster)")
	pf.StringVar(&o.KubeconfigPath, "kubeconfig", "", "where to write the admin kubeconfig (default <root>/_output/kubeconfig)")
	pf.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "how long to wait for each step")
	for _, c := range []*cobra.Command{root, up} {
		f := c.Flags()
		f.IntVar(&o.Nodes, "nodes", 3, "number of kwok nodes")
		f.IntVar(&o.Workers, "workers", 2, "number of worker nodes besides the control-plane node (runtime kind)")
		f.StringVar(&o.NodeImage, "node-image", "", "node image (runtime kind; default gantry.local/kind-node:<Kubernetes release>, made by `make node-image`)")
		f.StringVar(&o.ControlPlane, "control-plane", cluster.ControlPlaneGantry, "whose kube-apiserver and kube-scheduler run the cluster: "+
			cluster.ControlPlaneGantry+" (Gantry's) or "+cluster.ControlPlaneStock+" (upstream's, unpatched, with Gantry's add-ons as on a managed cluster; runtime kind)")
		f.IntVar(&o.APIServerPort, "port", 0, "kube-apiserver port (0 picks a free one)")
		f.StringVar(&o.CRDDir, "crds", "", "directory searched for CRD YAML (default <root>/crds)")
		f.StringVar(&o.SchedulerConfig, "scheduler-config", "", "KubeSchedulerConfiguration file for kube-scheduler (default <root>/kind/config/kube-scheduler.yaml)")
		f.BoolVar(&o.GangScheduling, "gang-scheduling", false, "the gang-scheduling variant: GenericWorkload on in the control plane and the schedulers, PodGroups served, and ProvisioningRequests made for unschedulable gangs")
		f.BoolVar(&o.Kueue, "kueue", false, "also install Kueue (sigs.k8s.io/kueue, pinned in hack/tools/kueue; `make kueue` builds it); a cluster keeps it once installed")
		f.BoolVar(&o.Retain, "retain", false, "keep a cluster whose creation failed, for debugging")
		f.StringArrayVar(&o.APIServerArgs, "apiserver-arg", nil, "extra kube-apiserver flag as name=value (repeatable)")
		f.StringArrayVar(&o.ProvisionerArgs, "provisioner-arg", nil, "extra gantry-provisioner flag as name=value (repeatable), e.g. simulation-budget=500")
	}
	root.AddCommand(up, down, status, upgrade)
	return root
}

// Main runs the program and returns its exit code, printing errors plainly.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if err := Run(ctx, args, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "ERROR: %v\n", err)
		return 1
	}
	return 0
}
