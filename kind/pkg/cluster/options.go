package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/internal/repo"
)

// Options describe the cluster to bring up. Paths left empty are derived
// from Root, the repository checkout.
type Options struct {
	// Name of the cluster; several may coexist under one WorkDir.
	Name string
	// Runtime selects how the control plane runs: "local" or "kind".
	Runtime string
	// Root is the repository checkout. Empty: found from the working
	// directory, or from BUILD_WORKSPACE_DIRECTORY under `bazel run`.
	Root string
	// BinDir holds the built binaries (default <Root>/_output/bin).
	BinDir string
	// CRDDir is searched for CustomResourceDefinition YAML (default <Root>/crds).
	CRDDir string
	// WorkDir holds the runtime's state: PKI, logs, pids (default <Root>/_output/cluster).
	WorkDir string
	// KubeconfigPath is where the admin kubeconfig is written (default <Root>/_output/kubeconfig).
	KubeconfigPath string
	// Nodes is how many kwok nodes the cluster has.
	Nodes int
	// Workers is how many worker nodes a runtime with real nodes (kind)
	// gives the cluster besides its control-plane node; the local runtime
	// has none and ignores it.
	Workers int
	// NodeImage is the node image of a runtime with real nodes (default
	// gantry.local/kind-node:<pinned Kubernetes release>, `make node-image`).
	NodeImage string
	// ControlPlane is whose kube-apiserver and kube-scheduler run the
	// cluster: ControlPlaneGantry (default) or ControlPlaneStock (upstream's,
	// unpatched, with Gantry's add-ons installed as on a managed cluster;
	// runtime kind only).
	ControlPlane string
	// APIServerPort pins kube-apiserver's port; 0 picks a free one.
	APIServerPort int
	// SchedulerConfig is the KubeSchedulerConfiguration of kube-scheduler
	// (default <Root>/kind/config/kube-scheduler.yaml: the default profile
	// and a second one, gantry-best-effort, both generated from Gantry's
	// profile in scheduler/profiles/gantry.yaml).
	SchedulerConfig string
	// APIServerArgs are extra kube-apiserver flags, "name=value" (without
	// dashes), e.g. "disable-admission-plugins=MetadataPolicy".
	APIServerArgs []string
	// ProvisionerArgs are extra gantry-provisioner flags, "name=value"
	// (without dashes), e.g. "simulation-budget=500", appended after the
	// runtime's own (a flag given twice takes the last value).
	ProvisionerArgs []string
	// GangScheduling is the gang-scheduling variant: the GenericWorkload
	// gate on in kube-apiserver, kube-controller-manager and the
	// schedulers, PodGroups (scheduling.k8s.io/v1beta1) served, and
	// gantry-provisioner making ProvisioningRequests for unschedulable
	// gangs (autoscaler/config/components/pod-group-requests).
	GangScheduling bool
	// Kueue installs Kueue (sigs.k8s.io/kueue, pinned by hack/tools/kueue)
	// as an add-on once the cluster is up: the ProvisioningRequest client
	// Gantry is tested against (`make kueue` builds it; runtime kind runs
	// the image `make images` builds). A cluster keeps Kueue once it has it.
	Kueue bool
	// Timeout bounds each wait (control plane, nodes, CRDs).
	Timeout time.Duration
	// Retain keeps a cluster whose creation failed, for debugging.
	Retain bool
	// Out receives progress lines.
	Out io.Writer
}

// The control planes a cluster can run (Options.ControlPlane).
const (
	// ControlPlaneGantry is Gantry's kube-apiserver and kube-scheduler,
	// with config/overlays/full.
	ControlPlaneGantry = "gantry"
	// ControlPlaneStock is upstream's kube-apiserver and kube-scheduler,
	// built unpatched from the same pins, with config/overlays/managed: the
	// add-ons as a cluster whose control plane cannot be replaced gets them.
	ControlPlaneStock = "stock"
)

// What Options.GangScheduling turns on: the feature gate, the API group
// version kube-apiserver serves, and the components of Gantry's install
// that the cluster's add-ons then take (paths from the repository root;
// the second applies to the stock control plane's gantry-scheduler).
const (
	GangFeatureGate   = "GenericWorkload"
	GangRuntimeConfig = "scheduling.k8s.io/v1beta1"
)

var (
	GangRequestsComponent   = []string{"autoscaler", "config", "components", "pod-group-requests"}
	GangSchedulingComponent = []string{"scheduler", "config", "components", "gang-scheduling"}
)

// DefaultName is the name of the cluster `make up` creates.
const DefaultName = "gantry"

// Complete fills in defaults and checks the options.
func (o *Options) Complete() error {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Runtime == "" {
		o.Runtime = "local"
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.ControlPlane == "" {
		o.ControlPlane = ControlPlaneGantry
	}
	if o.ControlPlane != ControlPlaneGantry && o.ControlPlane != ControlPlaneStock {
		return fmt.Errorf("--control-plane must be %s or %s, got %q", ControlPlaneGantry, ControlPlaneStock, o.ControlPlane)
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Minute
	}
	if o.Nodes < 0 {
		return fmt.Errorf("--nodes must be 0 or more, got %d", o.Nodes)
	}
	if o.Workers < 0 {
		return fmt.Errorf("--workers must be 0 or more, got %d", o.Workers)
	}
	if o.APIServerPort < 0 || o.APIServerPort > 65535 {
		return fmt.Errorf("--port must be a TCP port (0 for any free port), got %d", o.APIServerPort)
	}
	for _, a := range o.ProvisionerArgs {
		if _, err := ProvisionerFlag(a); err != nil {
			return err
		}
	}
	if o.Root == "" {
		root, err := repo.Root()
		if errors.Is(err, repo.ErrNotFound) {
			return fmt.Errorf("%w: run from the repository or pass --root", err)
		}
		if err != nil {
			return err
		}
		o.Root = root
	}
	def := func(p *string, rel string) {
		if *p == "" {
			*p = filepath.Join(o.Root, rel)
		}
		*p, _ = filepath.Abs(*p)
	}
	def(&o.BinDir, "_output/bin")
	def(&o.CRDDir, "crds")
	def(&o.WorkDir, "_output/cluster")
	def(&o.KubeconfigPath, "_output/kubeconfig")
	def(&o.SchedulerConfig, "kind/config/kube-scheduler.yaml")
	if _, err := os.Stat(o.SchedulerConfig); err != nil {
		return fmt.Errorf("scheduler configuration: %w", err)
	}
	return nil
}

// ProvisionerFlag is the command-line form (--name=value) of an entry of
// Options.ProvisionerArgs.
func ProvisionerFlag(arg string) (string, error) {
	name, value, ok := strings.Cut(arg, "=")
	name = strings.TrimPrefix(name, "--")
	if !ok || name == "" || strings.ContainsAny(name, " \t\n") {
		return "", fmt.Errorf("--provisioner-arg %q: want name=value", arg)
	}
	return "--" + name + "=" + value, nil
}
