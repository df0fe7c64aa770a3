package cluster

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/kind/pkg/kueue"
)

// Runtime creates and removes the control plane of a cluster. It is the
// small seam between Gantry and the engine that runs the processes, in the
// spirit of kind's node providers.
type Runtime interface {
	// Name is the runtime's name, as given to --runtime.
	Name() string
	// Preflight checks that everything Create needs is present, and returns
	// an error that says how to fix it when not.
	Preflight(ctx context.Context) error
	// State reports whether the cluster exists and whether its processes run.
	State(ctx context.Context) (State, error)
	// Create starts a new control plane and returns when it serves.
	Create(ctx context.Context) error
	// Start restarts the processes of an existing, stopped cluster.
	Start(ctx context.Context) error
	// Delete stops every process and removes every file the runtime made.
	Delete(ctx context.Context) error
	// Kubeconfig is the path of the admin kubeconfig of the cluster.
	Kubeconfig() string
	// Components lists the control-plane components the runtime runs.
	Components() []string
	// LogTail returns the last lines of a component's log, for error messages.
	LogTail(component string, lines int) (string, error)
	// Stopped lists the components whose process is not running.
	Stopped(ctx context.Context) ([]string, error)
	// ExportLogs copies every component's log into dir.
	ExportLogs(ctx context.Context, dir string) error
	// Metrics scrapes a component's Prometheus metrics.
	Metrics(ctx context.Context, component string) (string, error)
}

// WorkloadInstaller is implemented by runtimes that run some of Gantry's
// components as workloads of the cluster they create (the kind runtime:
// gantry-provisioner and the kwok controller) rather than as processes
// next to it. Up calls it once the CRDs are established and the control
// plane holds its leases; it returns when the workloads are available, with
// a short summary for the progress line.
type WorkloadInstaller interface {
	InstallWorkloads(ctx context.Context, cfg *rest.Config) (string, error)
	// Workloads names them, for the progress line.
	Workloads() []string
}

// KueueRunner is implemented by runtimes that can run Kueue's manager
// (Options.Kueue). RunKueue applies Kueue's manifests (kueue.Render) as
// the runtime runs the manager, starts it, and returns once it runs, with
// a short summary for the progress line; Up then waits for its webhooks.
type KueueRunner interface {
	RunKueue(ctx context.Context, cfg *rest.Config, m kueue.Module) (string, error)
}

// NodeDescriber is implemented by runtimes whose clusters have real nodes
// (that run containers) besides the kwok nodes every runtime can add.
type NodeDescriber interface {
	// DescribeNodes says which, e.g. "1 control-plane node and 2 workers".
	DescribeNodes() string
}

// ImageNamer is implemented by runtimes whose nodes run Gantry's images
// (the kind runtime, whose node image preloads them): Image is the
// reference of a component's image (e.g. gantry-webhook) that the nodes
// have, for workloads a test or an operator deploys on the cluster.
type ImageNamer interface {
	Image(component string) string
}

// State is what a runtime knows of its cluster.
type State string

const (
	// StateAbsent means there is no cluster of that name.
	StateAbsent State = "Absent"
	// StateRunning means the cluster exists and all its processes run.
	StateRunning State = "Running"
	// StateStopped means the cluster exists but some process is not running.
	StateStopped State = "Stopped"
)

// StateOf is the state of an existing cluster, given the components that
// are not running: Running when there are none.
func StateOf(stopped []string) State {
	if len(stopped) > 0 {
		return StateStopped
	}
	return StateRunning
}

// RuntimeFactory builds a runtime for the given options.
type RuntimeFactory func(o *Options) (Runtime, error)

var runtimes = map[string]RuntimeFactory{}

// RegisterRuntime makes a runtime selectable by name. Runtime packages call it
// from init; the program imports the ones it ships.
func RegisterRuntime(name string, f RuntimeFactory) {
	if _, dup := runtimes[name]; dup {
		panic(fmt.Sprintf("cluster runtime %q registered twice", name))
	}
	runtimes[name] = f
}

// Runtimes lists the registered runtime names.
func Runtimes() []string {
	names := make([]string, 0, len(runtimes))
	for n := range runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func newRuntime(o *Options) (Runtime, error) {
	f, ok := runtimes[o.Runtime]
	if !ok {
		return nil, fmt.Errorf("unknown runtime %q: choose one of %s", o.Runtime, strings.Join(Runtimes(), ", "))
	}
	return f(o)
}

// NotSupportedError is returned by runtimes that cannot do what was asked on
// this machine or in this release.
type NotSupportedError struct {
	Runtime string
	Reason  string
}

func (e *NotSupportedError) Error() string {
	return fmt.Sprintf("runtime %q is not supported yet: %s", e.Runtime, e.Reason)
}

// ListenerLister is implemented by runtimes whose components run as
// processes of this machine (the local runtime): the TCP sockets they
// listen on, for the check that a development cluster serves the loopback
// only.
type ListenerLister interface {
	Listeners() ([]Listener, error)
}

// ResidentMemoryReader is implemented by runtimes whose components run as
// processes of this machine (the local runtime): a component's resident
// memory, for the checks that what tenants store does not grow it.
type ResidentMemoryReader interface {
	ResidentMemory(component string) (int64, error)
}

// Listener is a listening TCP socket of a component.
type Listener struct {
	// Component is the process's name in the runtime (kube-apiserver,
	// etcd, gantry-provisioner, ...).
	Component string
	// Address is the local address, host:port.
	Address string
}

// ComponentRouter is implemented by runtimes that can send the control
// plane's clients of kube-apiserver through another server: a fault proxy
// (test/faultproxy), for the soak test.
type ComponentRouter interface {
	// RouteComponents makes the components that are clients of
	// kube-apiserver reach it through server, whose certificate they then
	// do not verify, and restarts them; server "" routes them straight to
	// kube-apiserver again. It returns the components it restarted.
	RouteComponents(ctx context.Context, server string) ([]string, error)
}

// ControlPlaneCommander is implemented by runtimes whose control plane
// runs on a node of its own (the kind runtime's control-plane container):
// a command there, for tests that place a tool on the cluster's paths
// (the soak test's fault proxy).
type ControlPlaneCommander interface {
	// ControlPlaneCommand runs name with args on the control-plane node,
	// with stdin (nil: none), and returns its standard output; an error
	// names the command and carries its standard error.
	ControlPlaneCommand(ctx context.Context, stdin io.Reader, name string, args ...string) ([]byte, error)
}
