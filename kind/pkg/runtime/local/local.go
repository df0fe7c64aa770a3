// Package local runs a Gantry cluster as local processes through kwokctl's
// binary runtime: etcd, Gantry's kube-apiserver and kube-scheduler, upstream
// kube-controller-manager, the kwok controller and gantry-provisioner, all
// from the build output.
// kwokctl owns process supervision and the cluster PKI; this package only
// tells it which binaries to run and reads back its state.
package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
)

// Name is the runtime's name.
const Name = "local"

func init() {
	cluster.RegisterRuntime(Name, func(o *cluster.Options) (cluster.Runtime, error) {
		if o.ControlPlane == cluster.ControlPlaneStock {
			return nil, fmt.Errorf("--control-plane %s needs --runtime kind: the local runtime runs Gantry's control plane only", cluster.ControlPlaneStock)
		}
		return New(o), nil
	})
}

// components are the processes kwokctl runs, by the names it gives their
// logs and pid files, and the binary each needs.
var components = []struct{ name, binary string }{
	{"etcd", "etcd"},
	{"kube-apiserver", "kube-apiserver"},
	{"kube-controller-manager", "kube-controller-manager"},
	{"kube-scheduler", "kube-scheduler"},
	{"kwok-controller", "kwok"},
	{"gantry-provisioner", "gantry-provisioner"},
}

// Runtime is the local runtime.
type Runtime struct {
	o *cluster.Options
}

var _ cluster.Runtime = &Runtime{}

// New returns the local runtime for o.
func New(o *cluster.Options) *Runtime { return &Runtime{o: o} }

// Name implements cluster.Runtime.
func (r *Runtime) Name() string { return Name }

// Components implements cluster.Runtime.
func (r *Runtime) Components() []string {
	out := make([]string, 0, len(components)+1)
	for _, c := range components {
		out = append(out, c.name)
	}
	if r.hasKueue() {
		out = append(out, kueue.Component)
	}
	return out
}

func (r *Runtime) bin(name string) string { return filepath.Join(r.o.BinDir, name) }

func (r *Runtime) clusterDir() string { return filepath.Join(r.o.WorkDir, "clusters", r.o.Name) }

// Kubeconfig implements cluster.Runtime.
func (r *Runtime) Kubeconfig() string { return r.o.KubeconfigPath }

// Preflight implements cluster.Runtime: every binary is built, and a pinned
// apiserver port is free.
func (r *Runtime) Preflight(ctx context.Context) error {
	var missing []string
	for _, b := range append([]string{"kwokctl"}, binaries()...) {
		if st, err := os.Stat(r.bin(b)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing binaries in %s: %s\nrun `make build` first", r.o.BinDir, strings.Join(missing, ", "))
	}
	if r.o.Kueue || r.hasKueue() {
		if st, err := os.Stat(r.bin(kueue.Component)); err != nil || st.Mode()&0o111 == 0 {
			return fmt.Errorf("missing binary %s in %s: run `make kueue` first", kueue.Component, r.o.BinDir)
		}
	}
	if r.o.APIServerPort != 0 {
		if state, err := r.State(ctx); err == nil && state == cluster.StateAbsent {
			return checkPortFree(r.o.APIServerPort)
		}
	}
	return nil
}

func binaries() []string {
	out := make([]string, 0, len(components))
	for _, c := range components {
		out = append(out, c.binary)
	}
	return out
}

func checkPortFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("kube-apiserver port %d is in use (%w): stop what holds it, or pass --port 0 to pick a free port", port, err)
	}
	return l.Close()
}

// State implements cluster.Runtime.
func (r *Runtime) State(ctx context.Context) (cluster.State, error) {
	if _, err := os.Stat(filepath.Join(r.clusterDir(), "kwok.yaml")); errors.Is(err, os.ErrNotExist) {
		return cluster.StateAbsent, nil
	} else if err != nil {
		return "", err
	}
	stopped, err := r.Stopped(ctx)
	if err != nil {
		return "", err
	}
	return cluster.StateOf(stopped), nil
}

// Stopped implements cluster.Runtime by reading kwokctl's pid files.
func (r *Runtime) Stopped(_ context.Context) ([]string, error) {
	var out []string
	for _, c := range r.Components() {
		if !alive(r.pidFile(c)) {
			out = append(out, c)
		}
	}
	return out, nil
}

func alive(pidFile string) bool {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Create implements cluster.Runtime.
func (r *Runtime) Create(ctx context.Context) error {
	args := []string{
		"create", "cluster",
		"--runtime", "binary",
		"--kube-apiserver-binary", r.bin("kube-apiserver"),
		"--kube-scheduler-binary", r.bin("kube-scheduler"),
		"--kube-controller-manager-binary", r.bin("kube-controller-manager"),
		"--kwok-controller-binary", r.bin("kwok"),
		"--etcd-binary", r.bin("etcd"),
		// kwokctl would otherwise merge the context into ~/.kube/config.
		"--kubeconfig", "",
		"--wait", r.o.Timeout.String(),
		"--timeout", r.o.Timeout.String(),
	}
	if r.o.APIServerPort != 0 {
		args = append(args, "--kube-apiserver-port", strconv.Itoa(r.o.APIServerPort))
	}
	if r.o.SchedulerConfig != "" {
		args = append(args, "--kube-scheduler-config", r.o.SchedulerConfig)
	}
	for _, a := range r.o.APIServerArgs {
		args = append(args, "--extra-args", "kube-apiserver="+a)
	}
	if r.o.GangScheduling {
		// kube-apiserver, kube-controller-manager and kube-scheduler.
		args = append(args, "--kube-feature-gates", cluster.GangFeatureGate+"=true",
			"--kube-runtime-config", cluster.GangRuntimeConfig+"=true")
	}
	// kwokctl gives kube-scheduler no client CA and no delegated
	// authentication or authorization: every request to its secure port is
	// anonymous, and only the always-allowed paths (/metrics, health) are
	// served. With the cluster's CA and kubeconfig, client certificates and
	// bearer tokens (TokenReview) are authenticated and authorized by
	// kube-apiserver (SubjectAccessReview, as non-resource URLs), so
	// /gantry/v1/... and /debug/flags/... need the same RBAC as on a real
	// cluster (the admin has it). Every component binds the loopback
	// (writeComponentsConfig).
	kubeconfig := filepath.Join(r.clusterDir(), "kubeconfig.yaml")
	args = append(args,
		"--extra-args", "kube-scheduler=client-ca-file="+filepath.Join(r.clusterDir(), "pki", "ca.crt"),
		"--extra-args", "kube-scheduler=authentication-kubeconfig="+kubeconfig,
		"--extra-args", "kube-scheduler=authorization-kubeconfig="+kubeconfig,
		"--extra-args", "kube-scheduler=bind-address=127.0.0.1",
		// No Service network: kube-apiserver reaches a Service's
		// webhooks through its EndpointSlices (Kueue's, --kueue).
		"--extra-args", "kube-apiserver=enable-aggregator-routing=true")
	config, err := r.writeComponentsConfig()
	if err != nil {
		return err
	}
	args = append(args, "--config", config)
	if err := r.kwokctl(ctx, args...); err != nil {
		return err
	}
	return r.publishKubeconfig()
}

// writeComponentsConfig writes the kwokctl configuration that adds Gantry's
// own components to the cluster: gantry-provisioner, simulating with the
// cluster scheduler's configuration, leader elected as in production,
// scaling the kwok node groups of NodeGroups; and the stages kwok plays.
func (r *Runtime) writeComponentsConfig() (string, error) {
	schedulerConfig := ""
	if r.o.SchedulerConfig != "" {
		abs, err := filepath.Abs(r.o.SchedulerConfig)
		if err != nil {
			return "", err
		}
		schedulerConfig = abs
	}
	ports, err := freePorts(1)
	if err != nil {
		return "", fmt.Errorf("choosing gantry-provisioner's metrics port: %w", err)
	}
	metricsPort := ports[0]
	// Every component kwokctl starts listens on the loopback only (kwokctl's
	// default is 0.0.0.0: etcd would serve plain HTTP, unauthenticated, to
	// the network).
	config := fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  bindAddress: 127.0.0.1
components:
- name: gantry-provisioner
  binary: %q
  workDir: %q
  links: [kube-apiserver]
  args:
  - --kubeconfig=%s
  - --scheduler-config=%s
  - --leader-elect=true
  - --metrics-bind-address=127.0.0.1:%d
  - --health-probe-bind-address=0
  - --node-group-provider=kwok
  - --node-group-config=%s
  - --scale-down-unneeded-time=%s
  - --scale-down-interval=2s
  - --initial-node-group-backoff-duration=%s
  - --max-node-group-backoff-duration=%s
`, r.bin("gantry-provisioner"), r.clusterDir(), filepath.Join(r.clusterDir(), "kubeconfig.yaml"), schedulerConfig,
		metricsPort, r.nodeGroupsPath(), cluster.ScaleDownUnneededTime, cluster.NodeGroupBackoff, cluster.NodeGroupBackoff)
	provisionerArgs := r.o.ProvisionerArgs
	if r.o.GangScheduling {
		// As autoscaler/config/components/pod-group-requests sets it (the
		// process runs with the cluster's admin credentials).
		provisionerArgs = append([]string{"pod-group-requests-class=" + gangRequestsClass}, provisionerArgs...)
	}
	for _, a := range provisionerArgs {
		flag, err := cluster.ProvisionerFlag(a)
		if err != nil {
			return "", err
		}
		config += fmt.Sprintf("  - %q\n", flag)
	}
	// Its /metrics, over HTTPS with a certificate of its own, for callers
	// with a bearer token allowed to get the non-resource URL /metrics
	// (Metrics, which uses the admin certificate, gets 401: read it with
	// ComponentRequestAs).
	config += fmt.Sprintf("  metric:\n    scheme: https\n    host: 127.0.0.1:%d\n    path: /metrics\n    insecureSkipVerify: true\n", metricsPort)
	// kwokctl plays the stages it is given instead of its own: the build's
	// (hack/build.sh), kwok's fast ones and Gantry's, as in the kwok image.
	stages, err := os.ReadFile(r.bin("kwok-stages.yaml"))
	if err != nil {
		return "", fmt.Errorf("kwok's stages (written by make build): %w", err)
	}
	config += "---\n" + string(stages)
	if err := os.MkdirAll(r.o.WorkDir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(r.nodeGroupsPath(), []byte(cluster.NodeGroups), 0o600); err != nil {
		return "", err
	}
	path := filepath.Join(r.o.WorkDir, r.o.Name+"-gantry-components.yaml")
	return path, os.WriteFile(path, []byte(config), 0o600)
}

// nodeGroupsPath is where the provisioner's node-group configuration is
// written, next to the components configuration (kwokctl creates the
// cluster directory itself).
func (r *Runtime) nodeGroupsPath() string {
	p := filepath.Join(r.o.WorkDir, r.o.Name+"-gantry-node-groups.yaml")
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// Start implements cluster.Runtime.
func (r *Runtime) Start(ctx context.Context) error {
	if err := r.kwokctl(ctx, "start", "cluster", "--wait", r.o.Timeout.String(), "--timeout", r.o.Timeout.String()); err != nil {
		return err
	}
	if r.hasKueue() && !alive(r.pidFile(kueue.Component)) {
		if err := r.startKueue(); err != nil {
			return err
		}
	}
	return r.publishKubeconfig()
}

// Delete implements cluster.Runtime.
func (r *Runtime) Delete(ctx context.Context) error {
	if _, err := os.Stat(r.clusterDir()); err == nil {
		if err := r.stopKueue(ctx); err != nil {
			return fmt.Errorf("stopping Kueue: %w", err)
		}
		// kwokctl removes the cluster's context from the kubeconfig it is
		// given; give it its own, which goes away with the cluster.
		if err := r.kwokctl(ctx, "delete", "cluster", "--kubeconfig", r.componentsKubeconfig()); err != nil {
			return err
		}
	}
	if err := os.Remove(r.o.KubeconfigPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// kwokctl leaves the work dir's shared cache behind; remove the dir once
	// no cluster is left in it.
	if entries, err := os.ReadDir(filepath.Join(r.o.WorkDir, "clusters")); err == nil && len(entries) == 0 || errors.Is(err, os.ErrNotExist) {
		return os.RemoveAll(r.o.WorkDir)
	}
	return nil
}

// publishKubeconfig copies kwokctl's admin kubeconfig to the documented
// path: as kwokctl wrote it, also while the components are routed through
// another server (RouteComponents).
func (r *Runtime) publishKubeconfig() error {
	data, err := os.ReadFile(r.directKubeconfig())
	if errors.Is(err, os.ErrNotExist) {
		data, err = os.ReadFile(r.componentsKubeconfig())
	}
	if err != nil {
		return fmt.Errorf("kwokctl wrote no kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(r.o.KubeconfigPath), 0o755); err != nil {
		return err
	}
	return os.WriteFile(r.o.KubeconfigPath, data, 0o600)
}

// LogTail implements cluster.Runtime.
func (r *Runtime) LogTail(component string, lines int) (string, error) {
	data, err := os.ReadFile(filepath.Join(r.clusterDir(), "logs", component+".log"))
	if err != nil {
		return "", err
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n"), nil
}

// ExportLogs implements cluster.Runtime.
func (r *Runtime) ExportLogs(ctx context.Context, dir string) error {
	if _, err := os.Stat(r.clusterDir()); err != nil {
		return err
	}
	// kwokctl refuses to export into a directory left by an earlier run.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := r.kwokctl(ctx, "export", "logs", dir); err != nil {
		return err
	}
	return r.exportKeptLogs(dir)
}

// kwokctl runs kwokctl on this cluster. Its output is kept and shown only when
// it fails, so that progress stays readable.
func (r *Runtime) kwokctl(ctx context.Context, args ...string) error {
	args = append(args, "--name", r.o.Name)
	cmd := exec.CommandContext(ctx, r.bin("kwokctl"), args...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+r.o.WorkDir)
	// kwokctl must not read a user's kwok configuration or kubeconfig.
	cmd.Env = append(cmd.Env, "KWOK_CONFIG=", "KUBECONFIG=")
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kwokctl %s: %w\n%s", strings.Join(args[:2], " "), err, cluster.Indent(out.String()))
	}
	return nil
}

// gangRequestsClass is the class of the requests gantry-provisioner makes
// for unschedulable gangs with Options.GangScheduling.
const gangRequestsClass = "check-capacity.autoscaling.x-k8s.io"
