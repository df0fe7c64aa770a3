// Package kind is the runtime of Gantry clusters with real nodes: kind
// (sigs.k8s.io/kind, used as a library) runs one control-plane node and the
// workers as Docker containers of Gantry's node image (`make node-image`),
// whose kubeadm runs Gantry's kube-apiserver and kube-scheduler from the
// images preloaded in it. The runtime adds what kind leaves to a CNI
// provider (Gantry's pod network, network.go) and runs gantry-provisioner
// and the kwok controller as Deployments (workloads.go).
//
// Where Docker cannot grant --privileged (the machine's capability bounding
// set lacks CAP_SYS_RESOURCE), kind's docker calls go through a shim
// (privileged.go); the node image's init does the rest. Everything the
// runtime makes is named after the cluster: the kind node containers
// (labelled by kind with the cluster's name) and one Docker network
// labelled as Gantry's, so that `down` removes exactly that.
package kind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	kindnodes "sigs.k8s.io/kind/pkg/cluster/nodes"
	kindexec "sigs.k8s.io/kind/pkg/exec"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// Name is the runtime's name.
const Name = "kind"

// DefaultImageRepository is the registry part of every image Gantry builds
// (`make images`); no registry answers to it, the node image preloads them.
const DefaultImageRepository = "gantry.local"

func init() {
	cluster.RegisterRuntime(Name, func(o *cluster.Options) (cluster.Runtime, error) { return New(o) })
}

// Runtime is the kind runtime.
type Runtime struct {
	o *cluster.Options
	// kubeVersion is the pinned Kubernetes release, e.g. v1.37.2.
	kubeVersion string
	nodeImage   string
	// plane is the cluster's control plane: the one recorded when it was
	// made, else the one asked for (cluster.Options.ControlPlane).
	plane string
	// recorded is the control plane recorded with the cluster, if any.
	recorded string
	provider *kindcluster.Provider
	log      *fileLogger
}

var (
	_ cluster.Runtime               = &Runtime{}
	_ cluster.WorkloadInstaller     = &Runtime{}
	_ cluster.NodeDescriber         = &Runtime{}
	_ cluster.ComponentClient       = &Runtime{}
	_ cluster.ComponentRestarter    = &Runtime{}
	_ cluster.ReplicaRestarter      = &Runtime{}
	_ cluster.ControlPlaneCommander = &Runtime{}
	_ cluster.ImageNamer            = &Runtime{}
)

// New returns the kind runtime for o.
func New(o *cluster.Options) (*Runtime, error) {
	r, err := newRuntime(o)
	if err != nil {
		return nil, err
	}
	// Every kind call may exec in a node (`docker exec --privileged`), not
	// only create's.
	if err := r.useDocker(); err != nil {
		return nil, err
	}
	return r, nil
}

func newRuntime(o *cluster.Options) (*Runtime, error) {
	kv, err := kubeVersion(filepath.Join(o.Root, "go.mod"))
	if err != nil {
		return nil, err
	}
	r := &Runtime{o: o, kubeVersion: kv, nodeImage: o.NodeImage}
	if r.nodeImage == "" {
		r.nodeImage = DefaultImageRepository + "/kind-node:" + kv
	}
	r.log = &fileLogger{path: filepath.Join(r.dir(), "kind.log")}
	r.plane = o.ControlPlane
	if data, err := os.ReadFile(r.controlPlaneFile()); err == nil {
		r.recorded = strings.TrimSpace(string(data))
		if r.recorded != cluster.ControlPlaneGantry && r.recorded != cluster.ControlPlaneStock {
			return nil, fmt.Errorf("%s records control plane %q, neither %s nor %s", r.controlPlaneFile(), r.recorded,
				cluster.ControlPlaneGantry, cluster.ControlPlaneStock)
		}
		r.plane = r.recorded
	}
	r.provider = kindcluster.NewProvider(kindcluster.ProviderWithDocker(), kindcluster.ProviderWithLogger(r.log))
	return r, nil
}

// Image implements cluster.ImageNamer: Gantry's images are preloaded in the
// node image under DefaultImageRepository, tagged with the pinned release.
func (r *Runtime) Image(component string) string {
	return DefaultImageRepository + "/" + component + ":" + r.kubeVersion
}

// kubeVersion reads the pinned Kubernetes release from the checkout's go.mod:
// the node image and every image it preloads are tagged with it.
func kubeVersion(gomod string) (string, error) {
	v, err := requiredVersion(gomod, "k8s.io/kubernetes")
	if err != nil {
		return "", fmt.Errorf("reading the pinned Kubernetes release: %w", err)
	}
	return v, nil
}

// Name implements cluster.Runtime.
func (r *Runtime) Name() string { return Name }

// DescribeNodes implements cluster.NodeDescriber.
func (r *Runtime) DescribeNodes() string {
	return fmt.Sprintf("1 control-plane node (%s control plane) and %d workers of %s", r.plane, r.o.Workers, r.nodeImage)
}

// dir holds the runtime's files for the cluster: kind's log, the docker shim.
func (r *Runtime) dir() string { return filepath.Join(r.o.WorkDir, "kind", r.o.Name) }

// controlPlaneFile records the cluster's control plane, so that status,
// down and the e2e suites know it without being told.
func (r *Runtime) controlPlaneFile() string { return filepath.Join(r.dir(), "control-plane") }

// network is the Docker network of the cluster's nodes.
func (r *Runtime) network() string { return "gantry-" + r.o.Name }

// controlPlane is the control-plane node's container (and Node) name.
func (r *Runtime) controlPlane() string { return r.o.Name + "-control-plane" }

// Kubeconfig implements cluster.Runtime.
func (r *Runtime) Kubeconfig() string { return r.o.KubeconfigPath }

// Components implements cluster.Runtime: the static pods of the control
// plane, then Gantry's workloads; all run on the control-plane node.
func (r *Runtime) Components() []string {
	out := make([]string, 0, len(r.components()))
	for _, c := range r.components() {
		out = append(out, c.name)
	}
	return out
}

// Preflight implements cluster.Runtime: Docker answers and the node image
// is there.
func (r *Runtime) Preflight(ctx context.Context) error {
	if _, err := docker(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		return fmt.Errorf("the kind runtime needs a Docker engine: %w", err)
	}
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", r.nodeImage); err != nil {
		return fmt.Errorf("node image %s is not in Docker: run `make node-image` (or pass --node-image)", r.nodeImage)
	}
	if _, err := os.Stat(r.o.SchedulerConfig); err != nil {
		return fmt.Errorf("scheduler configuration: %w", err)
	}
	if r.recorded != "" && r.recorded != r.o.ControlPlane {
		ns, err := r.nodes()
		if err != nil {
			return err
		}
		if len(ns) > 0 {
			return fmt.Errorf("cluster %q runs the %s control plane; `down` it first to make it with --control-plane %s", r.o.Name, r.recorded, r.o.ControlPlane)
		}
		r.plane = r.o.ControlPlane // what was recorded is gone
	}
	return nil
}

var (
	shimOnce sync.Once
	shimErr  error
)

// useDocker puts the docker shim first on this process's PATH when Docker
// cannot grant --privileged. kind runs the docker CLI it finds on PATH and
// offers no other hook; the change is made once per process, and only to
// this process's environment.
func (r *Runtime) useDocker() error {
	shimOnce.Do(func() { shimErr = r.setDockerPath() })
	return shimErr
}

func (r *Runtime) setDockerPath() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	env, restricted, err := dockerPath(filepath.Join(r.o.WorkDir, "kind", "bin"), string(status))
	if err != nil {
		return err
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	if restricted {
		r.log.Warn("Docker cannot grant --privileged here (no CAP_SYS_RESOURCE in the bounding set): kind's docker calls go through Gantry's shim")
	}
	return nil
}

// nodes lists the cluster's node containers.
func (r *Runtime) nodes() ([]kindnodes.Node, error) {
	return r.provider.ListNodes(r.o.Name)
}

// State implements cluster.Runtime.
func (r *Runtime) State(ctx context.Context) (cluster.State, error) {
	ns, err := r.nodes()
	if err != nil {
		return "", fmt.Errorf("listing the kind nodes of %q: %w", r.o.Name, err)
	}
	if len(ns) == 0 {
		return cluster.StateAbsent, nil
	}
	if err := r.owned(ctx); err != nil {
		return "", err
	}
	running, err := r.containersRunning(ctx, ns)
	if err != nil {
		return "", err
	}
	if !running {
		return cluster.StateStopped, nil
	}
	stopped, err := r.Stopped(ctx)
	if err != nil {
		return "", err
	}
	return cluster.StateOf(stopped), nil
}

// owned fails for a kind cluster of the same name that Gantry did not make
// (its control-plane node is not on Gantry's network): Gantry never touches it.
func (r *Runtime) owned(ctx context.Context) error {
	out, err := docker(ctx, "inspect", "--format", "{{json .NetworkSettings.Networks}}", r.controlPlane())
	if err != nil {
		return fmt.Errorf("inspecting %s: %w", r.controlPlane(), err)
	}
	if !strings.Contains(out, `"`+r.network()+`"`) {
		return fmt.Errorf("a kind cluster named %q exists that Gantry did not make (its nodes are not on Docker network %s); Gantry leaves it alone: pass another --name", r.o.Name, r.network())
	}
	return nil
}

func (r *Runtime) containersRunning(ctx context.Context, ns []kindnodes.Node) (bool, error) {
	args := []string{"inspect", "--format", "{{.State.Running}}"}
	for _, n := range ns {
		args = append(args, n.String())
	}
	out, err := docker(ctx, args...)
	if err != nil {
		return false, err
	}
	return !strings.Contains(out, "false"), nil
}

// Create implements cluster.Runtime: the network, kind's cluster (nodes,
// kubeadm), then the pod network; it returns when every node is Ready.
func (r *Runtime) Create(ctx context.Context) error {
	if err := r.ensureNetwork(ctx); err != nil {
		return err
	}
	if err := os.MkdirAll(r.dir(), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(r.controlPlaneFile(), []byte(r.plane+"\n"), 0o644); err != nil {
		return err
	}
	p := configParams{
		Name:            r.o.Name,
		Workers:         r.o.Workers,
		NodeImage:       r.nodeImage,
		ImageRepository: DefaultImageRepository,
		APIServerArgs:   r.o.APIServerArgs,
		APIServerPort:   r.o.APIServerPort,
		GangScheduling:  r.o.GangScheduling,
	}
	var err error
	if r.plane == cluster.ControlPlaneStock {
		p.StockPatches, err = r.writeStockPatches()
	} else {
		p.SchedulerConfig, err = r.writeSchedulerConfig()
	}
	if err != nil {
		return err
	}
	cfg, err := clusterConfig(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(r.o.KubeconfigPath), 0o755); err != nil {
		return err
	}
	// kind merges the cluster's context into the kubeconfig (which may be
	// a user's own, given with --kubeconfig), and down takes it out again.
	networkMu.Lock()
	restore := setenv("KIND_EXPERIMENTAL_DOCKER_NETWORK", r.network())
	err = r.provider.Create(r.o.Name,
		kindcluster.CreateWithV1Alpha4Config(cfg),
		kindcluster.CreateWithKubeconfigPath(r.o.KubeconfigPath),
		// Up removes a failed cluster itself, after exporting its logs.
		kindcluster.CreateWithRetain(true),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false),
	)
	restore()
	networkMu.Unlock()
	if err != nil {
		return r.kindError("kind could not create the cluster", err)
	}
	return r.setupNodes(ctx)
}

// writeSchedulerConfig writes the scheduler configuration the control-plane
// node mounts, and returns its path.
func (r *Runtime) writeSchedulerConfig() (string, error) {
	out, err := r.nodeSchedulerConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(r.dir(), "kube-scheduler.yaml")
	if err := os.MkdirAll(r.dir(), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, out, 0o644)
}

// nodeSchedulerConfig is the cluster's scheduler configuration as the
// control-plane node runs it (nodeSchedulerConfig of its file).
func (r *Runtime) nodeSchedulerConfig() ([]byte, error) {
	data, err := os.ReadFile(r.o.SchedulerConfig)
	if err != nil {
		return nil, fmt.Errorf("scheduler configuration: %w", err)
	}
	out, err := nodeSchedulerConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.o.SchedulerConfig, err)
	}
	return out, nil
}

// writeStockPatches writes kubeadm's patches of the stock control plane
// (stockPatches) and returns their directory.
func (r *Runtime) writeStockPatches() (string, error) {
	dir := filepath.Join(r.dir(), "stock-patches")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for name, data := range stockPatches(DefaultImageRepository, r.kubeVersion) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// networkMu serialises kind calls that read the network from the
// environment.
var networkMu sync.Mutex

func setenv(k, v string) (restore func()) {
	old, had := os.LookupEnv(k)
	_ = os.Setenv(k, v)
	return func() {
		if had {
			_ = os.Setenv(k, old)
		} else {
			_ = os.Unsetenv(k)
		}
	}
}

// kindError adds the output of the command kind ran that failed, and where
// kind's own log is.
func (r *Runtime) kindError(what string, err error) error {
	msg := fmt.Sprintf("%s: %v", what, err)
	var run *kindexec.RunError
	if errors.As(err, &run) {
		msg += fmt.Sprintf("\n  command: %s\n  output:\n%s", run.PrettyCommand(), cluster.Indent(tail(string(run.Output), 20)))
	}
	return fmt.Errorf("%s\n  kind's log: %s", msg, r.log.path)
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Start implements cluster.Runtime: starts the stopped node containers,
// restores the pod routes (they live in the nodes' network namespaces) and
// waits for the nodes; kubelet restarts the static pods.
func (r *Runtime) Start(ctx context.Context) error {
	ns, err := r.nodes()
	if err != nil {
		return err
	}
	args := []string{"start"}
	for _, n := range ns {
		args = append(args, n.String())
	}
	if _, err := docker(ctx, args...); err != nil {
		return err
	}
	return r.setupNodes(ctx)
}

// Delete implements cluster.Runtime: kind removes the cluster's node
// containers (by its label) and the cluster's entry of the kubeconfig;
// then the cluster's network, if Gantry made it and nothing else uses it.
func (r *Runtime) Delete(ctx context.Context) error {
	if ns, err := r.nodes(); err == nil && len(ns) > 0 {
		if err := r.owned(ctx); err != nil {
			return err
		}
	}
	if err := r.provider.Delete(r.o.Name, r.o.KubeconfigPath); err != nil {
		return r.kindError("kind could not delete the cluster", err)
	}
	if err := r.removeNetwork(ctx); err != nil {
		return err
	}
	if err := removeEmptyKubeconfig(r.o.KubeconfigPath); err != nil {
		return err
	}
	return os.RemoveAll(r.dir())
}

// ExportLogs implements cluster.Runtime: kind's node logs (journal,
// containerd, kubelet, every pod's containers) and kind's own log.
func (r *Runtime) ExportLogs(_ context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if data, err := os.ReadFile(r.log.path); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "kind.log"), data, 0o644)
	}
	ns, err := r.nodes()
	if err != nil || len(ns) == 0 {
		return err
	}
	// kind's collector goes on past a failed command (e.g. `crictl images`:
	// the node image has ctr, not crictl) and reports them all at the end:
	// what it could not collect is noted next to what it did.
	if err := r.provider.CollectLogs(r.o.Name, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ns[0].String(), "journal.log")); serr != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "not-collected.txt"), []byte(err.Error()+"\n"), 0o644)
	}
	return nil
}

// timeout bounds one wait of the runtime.
func (r *Runtime) timeout() time.Duration { return r.o.Timeout }
