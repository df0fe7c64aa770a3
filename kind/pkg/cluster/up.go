package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantry-dev/gantry/crds/install"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
)

// Cluster is a handle on a named cluster of a runtime.
type Cluster struct {
	opts    *Options
	runtime Runtime
	p       *progress
}

// New completes o and returns a handle on the cluster it names.
func New(o *Options) (*Cluster, error) {
	if err := o.Complete(); err != nil {
		return nil, err
	}
	r, err := newRuntime(o)
	if err != nil {
		return nil, err
	}
	return &Cluster{opts: o, runtime: r, p: newProgress(o.Out)}, nil
}

// Kubeconfig is the admin kubeconfig of the cluster.
func (c *Cluster) Kubeconfig() string { return c.runtime.Kubeconfig() }

// Options are the cluster's options, completed.
func (c *Cluster) Options() Options { return *c.opts }

// Runtime is the runtime running the cluster.
func (c *Cluster) Runtime() Runtime { return c.runtime }

// ComponentMetrics scrapes a control-plane component's metrics.
func (c *Cluster) ComponentMetrics(ctx context.Context, component string) (string, error) {
	return c.runtime.Metrics(ctx, component)
}

// RESTConfig returns a client configuration for the cluster's admin user.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", c.Kubeconfig(), err)
	}
	// Node creation and readiness polling are bursts of small requests; the
	// client-side default of 5 QPS would dominate bring-up time.
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg, nil
}

// Up creates the cluster, or converges an existing one, and prints progress.
func (c *Cluster) Up(ctx context.Context) (err error) {
	o := c.opts
	fmt.Fprintf(o.Out, "Bringing up Gantry cluster %q (runtime %s, %s)\n", o.Name, c.runtime.Name(), c.shape())

	if err := c.runtime.Preflight(ctx); err != nil {
		return err
	}
	state, err := c.runtime.State(ctx)
	if err != nil {
		return err
	}
	created := false
	switch state {
	case StateRunning:
		c.p.info("cluster %q already exists and is running; checking its shape", o.Name)
	case StateStopped:
		if err := c.p.step("restarting stopped components", func() (string, error) {
			return "", c.runtime.Start(ctx)
		}); err != nil {
			return c.explain(ctx, err)
		}
	default:
		if err := c.p.step("starting control plane ("+strings.Join(c.runtime.Components(), ", ")+")", func() (string, error) {
			return "", c.runtime.Create(ctx)
		}); err != nil {
			return c.cleanupAfter(ctx, c.explain(ctx, err))
		}
		created = true
	}
	defer func() {
		if err != nil && created {
			err = c.cleanupAfter(ctx, err)
		}
	}()

	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := c.p.step("waiting for kube-apiserver", func() (string, error) {
		return "", c.waitAPIServer(ctx, client)
	}); err != nil {
		return c.explain(ctx, err)
	}
	// Gantry's scheduler waits for its informers on Gantry's CRDs before it
	// competes for leadership, so the CRDs come before the leases.
	if err := c.p.step("installing CRDs from "+c.rel(o.CRDDir), func() (string, error) {
		names, err := install.Install(ctx, cfg, o.CRDDir, o.Timeout)
		if err != nil {
			return "", err
		}
		if len(names) == 0 {
			return "none found", nil
		}
		return fmt.Sprintf("%d established", len(names)), nil
	}); err != nil {
		return err
	}
	if err := c.p.step("waiting for kube-scheduler and kube-controller-manager leader leases", func() (string, error) {
		return "", c.waitLeases(ctx, client)
	}); err != nil {
		return c.explain(ctx, err)
	}
	if wi, ok := c.runtime.(WorkloadInstaller); ok {
		if err := c.p.step("deploying "+strings.Join(wi.Workloads(), " and "), func() (string, error) {
			return wi.InstallWorkloads(ctx, cfg)
		}); err != nil {
			return c.explain(ctx, err)
		}
	}
	if err := c.p.step(fmt.Sprintf("creating %d kwok nodes", o.Nodes), func() (string, error) {
		n, err := nodes.Ensure(ctx, client, nodes.Topology(o.Nodes))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d created, %d already present", n, o.Nodes-n), nil
	}); err != nil {
		return err
	}
	if err := c.p.step("waiting for nodes to be Ready", func() (string, error) {
		return "", nodes.WaitReady(ctx, client, o.Nodes, o.Timeout)
	}); err != nil {
		return c.explain(ctx, err)
	}

	if o.Kueue {
		if err := c.installKueue(ctx, cfg); err != nil {
			return err
		}
	}

	version, _ := client.Discovery().ServerVersion()
	fmt.Fprintf(o.Out, "\nGantry cluster %q is ready after %s", o.Name, time.Since(c.p.start).Round(100*time.Millisecond))
	if version != nil {
		fmt.Fprintf(o.Out, " (kube-apiserver %s)", version.GitVersion)
	}
	fmt.Fprintf(o.Out, ".\n  kubeconfig: %s\n  try:        %s --kubeconfig %s get nodes -L topology.kubernetes.io/zone,node.kubernetes.io/instance-type\n",
		c.Kubeconfig(), c.rel(filepath.Join(o.BinDir, "kubectl")), c.rel(c.Kubeconfig()))
	return nil
}

// installKueue runs Kueue's manager on the cluster and waits for its
// webhooks (Options.Kueue).
func (c *Cluster) installKueue(ctx context.Context, cfg *rest.Config) error {
	runner, ok := c.runtime.(KueueRunner)
	if !ok {
		return &NotSupportedError{Runtime: c.runtime.Name(), Reason: "it cannot run Kueue"}
	}
	m, err := kueue.FindModule(ctx, c.opts.Root)
	if err != nil {
		return err
	}
	if err := c.p.step(fmt.Sprintf("installing Kueue %s (%s)", m.Version, kueue.Namespace), func() (string, error) {
		return runner.RunKueue(ctx, cfg, m)
	}); err != nil {
		return c.explain(ctx, &componentError{component: kueue.Component, err: err})
	}
	if err := c.p.step("waiting for Kueue's webhooks", func() (string, error) {
		return "", kueue.WaitReady(ctx, cfg, c.opts.Timeout, func() bool {
			stopped, err := c.runtime.Stopped(ctx)
			return err == nil && slices.Contains(stopped, kueue.Component)
		})
	}); err != nil {
		return c.explain(ctx, &componentError{component: kueue.Component, err: err})
	}
	return nil
}

// shape describes the nodes the cluster gets.
func (c *Cluster) shape() string {
	kwok := fmt.Sprintf("%d kwok nodes", c.opts.Nodes)
	if d, ok := c.runtime.(NodeDescriber); ok {
		return d.DescribeNodes() + ", " + kwok
	}
	return kwok
}

// Down removes the cluster and everything the runtime made for it.
func (c *Cluster) Down(ctx context.Context) error {
	state, err := c.runtime.State(ctx)
	if err != nil {
		return err
	}
	if state == StateAbsent {
		fmt.Fprintf(c.opts.Out, "Gantry cluster %q does not exist; nothing to do.\n", c.opts.Name)
		return nil
	}
	return c.p.step(fmt.Sprintf("deleting cluster %q", c.opts.Name), func() (string, error) {
		return "", c.runtime.Delete(ctx)
	})
}

// Status prints the state of the cluster.
func (c *Cluster) Status(ctx context.Context) (State, error) {
	state, err := c.runtime.State(ctx)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(c.opts.Out, "cluster %q (runtime %s): %s\n", c.opts.Name, c.runtime.Name(), state)
	if state != StateAbsent {
		fmt.Fprintf(c.opts.Out, "  kubeconfig: %s\n", c.Kubeconfig())
	}
	if state == StateStopped {
		stopped, _ := c.runtime.Stopped(ctx)
		fmt.Fprintf(c.opts.Out, "  not running: %s (run `make up` to restart them)\n", strings.Join(stopped, ", "))
	}
	return state, nil
}

// waitAPIServer waits until kube-apiserver is ready.
func (c *Cluster) waitAPIServer(ctx context.Context, client kubernetes.Interface) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, c.opts.Timeout, true, func(ctx context.Context) (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		return &componentError{component: "kube-apiserver", err: fmt.Errorf("not ready after %s", c.opts.Timeout)}
	}
	return nil
}

// waitLeases waits until kube-scheduler and kube-controller-manager hold
// their leader leases, i.e. are working.
func (c *Cluster) waitLeases(ctx context.Context, client kubernetes.Interface) error {
	for _, lease := range []string{"kube-scheduler", "kube-controller-manager"} {
		var holder string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, c.opts.Timeout, true, func(ctx context.Context) (bool, error) {
			// A component that exited will not come back: fail at once.
			if stopped, err := c.runtime.Stopped(ctx); err == nil && slices.Contains(stopped, lease) {
				return false, errExited
			}
			l, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, lease, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err != nil {
				return false, nil
			}
			holder = leaseHolder(l)
			return holder != "", nil
		})
		if errors.Is(err, errExited) {
			return &componentError{component: lease, err: errExited}
		}
		if err != nil {
			return &componentError{component: lease, err: fmt.Errorf("did not acquire its leader lease within %s", c.opts.Timeout)}
		}
	}
	return nil
}

var errExited = errors.New("exited")

func leaseHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// componentError names the component that failed, so that explain can show
// its log.
type componentError struct {
	component string
	err       error
}

func (e *componentError) Error() string { return e.component + " " + e.err.Error() }
func (e *componentError) Unwrap() error { return e.err }

// Component names the component that failed.
func (e *componentError) Component() string { return e.component }

// explain adds to err the tail of the log of the component that failed: the
// one named by err, else every component whose process is gone.
func (c *Cluster) explain(ctx context.Context, err error) error {
	var suspects []string
	var named interface{ Component() string }
	if errors.As(err, &named) {
		suspects = append(suspects, named.Component())
	}
	if stopped, serr := c.runtime.Stopped(ctx); serr == nil {
		for _, s := range stopped {
			if len(suspects) == 0 || suspects[0] != s {
				suspects = append(suspects, s)
			}
		}
	}
	var b strings.Builder
	b.WriteString(err.Error())
	for _, s := range suspects {
		tail, terr := c.runtime.LogTail(s, 15)
		if terr != nil || strings.TrimSpace(tail) == "" {
			continue
		}
		fmt.Fprintf(&b, "\n\nlast lines of the %s log:\n%s", s, Indent(tail))
	}
	return errors.New(b.String())
}

// cleanupAfter exports the logs of a cluster whose creation failed and
// deletes it, unless Retain is set.
func (c *Cluster) cleanupAfter(ctx context.Context, err error) error {
	dir := filepath.Join(filepath.Dir(c.opts.WorkDir), "cluster-logs")
	// Use a fresh context: ctx may be the one that was cancelled.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if xerr := c.runtime.ExportLogs(cctx, dir); xerr == nil {
		err = fmt.Errorf("%w\n\ncomponent logs exported to %s", err, c.rel(dir))
	} else {
		err = fmt.Errorf("%w\n\nexporting component logs to %s failed: %w", err, c.rel(dir), xerr)
	}
	if c.opts.Retain {
		return fmt.Errorf("%w\nthe cluster was kept (--retain); remove it with `make down`", err)
	}
	if derr := c.runtime.Delete(cctx); derr != nil {
		return fmt.Errorf("%w\nremoving the failed cluster also failed: %w", err, derr)
	}
	return fmt.Errorf("%w\nthe failed cluster was removed (pass --retain to keep it)", err)
}

func (c *Cluster) rel(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// Indent indents every line of s by four spaces, for command output and
// logs quoted in error messages.
func Indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
