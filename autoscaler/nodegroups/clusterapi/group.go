package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

// Group is a node group of one MachineDeployment.
type Group struct {
	cfg  GroupConfig
	dyn  dynamic.Interface
	kube kubernetes.Interface
	mu   sync.Mutex // one change of the MachineDeployment at a time
	// minSize and maxSize as last resolved.
	minSize, maxSize atomic.Int64
	// machineNodes maps the machines last listed to their node names.
	machinesMu   sync.Mutex
	machineNodes map[string]string
}

var (
	_ nodegroups.NodeGroup         = &Group{}
	_ nodegroups.AttemptRollbacker = &Group{}
)

// ID implements nodegroups.NodeGroup.
func (g *Group) ID() string { return g.cfg.Name }

// MinSize implements nodegroups.NodeGroup.
func (g *Group) MinSize() int { return int(g.minSize.Load()) }

// MaxSize implements nodegroups.NodeGroup.
func (g *Group) MaxSize() int { return int(g.maxSize.Load()) }

// TargetSize implements nodegroups.NodeGroup: the MachineDeployment's
// spec.replicas.
func (g *Group) TargetSize(ctx context.Context) (int, error) {
	d, err := g.getDeployment(ctx)
	if err != nil {
		return 0, err
	}
	return d.replicas, nil
}

// TemplateNode implements nodegroups.NodeGroup.
func (g *Group) TemplateNode() *v1.Node {
	name := g.cfg.Name + "-template"
	labels := map[string]string{
		v1.LabelOSStable:   "linux",
		v1.LabelArchStable: "amd64",
	}
	for k, v := range g.cfg.TemplateNode.Labels {
		labels[k] = v
	}
	labels[nodegroups.LabelNodeGroup] = g.cfg.Name
	labels[v1.LabelHostname] = name
	capacity := g.cfg.TemplateNode.Capacity.DeepCopy()
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1.NodeSpec{Taints: append([]v1.Taint(nil), g.cfg.TemplateNode.Taints...)},
		Status:     v1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
}

// Nodes implements nodegroups.NodeGroup: the Nodes of the
// MachineDeployment's Machines (status.nodeRef), sorted by name. It runs
// Sync first.
func (g *Group) Nodes(ctx context.Context) ([]*v1.Node, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, nodes, err := g.sync(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Sync labels the machines of pending attempts and the nodes of the
// group's machines (see the package documentation), forgets finished
// attempts' bookkeeping, and takes back deletion requests that did not go
// through.
func (g *Group) Sync(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, _, err := g.sync(ctx)
	return err
}

// AttemptStatus is what became of a scale-up attempt.
type AttemptStatus struct {
	// Known is false when the group has no record of the attempt: no
	// machine carries it, and it is neither pending nor among the recently
	// finished.
	Known bool
	// RolledBack says RollBack removed the attempt.
	RolledBack bool
	// Machines of the attempt that exist, sorted.
	Machines []string
	// Nodes of those machines that exist, sorted.
	Nodes []string
	// Waiting is how many machines of the attempt the MachineSet controller
	// has not created yet.
	Waiting int
}

// Attempt reports an attempt's machines and nodes, after a Sync.
func (g *Group) Attempt(ctx context.Context, attempt string) (AttemptStatus, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, nodes, err := g.sync(ctx)
	if err != nil {
		return AttemptStatus{}, err
	}
	return v.attempt(attempt, nodes), nil
}

// IncreaseSize implements nodegroups.NodeGroup. It raises spec.replicas by
// delta and records the attempt in the same update; it returns the names of
// the attempt's Nodes that exist at its return (see the package
// documentation: usually none yet). It fails, writing nothing, if the group
// would exceed MaxSize, and scales nothing while machines the group removes
// still await deletion by the MachineSet controller. A call for an attempt
// the group already has scales nothing: it returns the attempt's nodes so
// far if delta is the same, and fails if delta differs or the attempt was
// rolled back.
func (g *Group) IncreaseSize(ctx context.Context, delta int, attempt string) ([]string, error) {
	if delta <= 0 {
		return nil, fmt.Errorf("node group %s: size increase must be positive, got %d", g.cfg.Name, delta)
	}
	if err := checkAttempt(attempt); err != nil {
		return nil, fmt.Errorf("node group %s: %w", g.cfg.Name, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v, err := g.load(ctx)
		if err != nil {
			return err
		}
		if s := v.attempt(attempt, nil); s.Known {
			if p := v.state.pending(attempt); p != nil && p.Delta != delta {
				return fmt.Errorf("node group %s: attempt %s asked for %d nodes, not %d", g.cfg.Name, attempt, p.Delta, delta)
			}
			if s.RolledBack {
				return fmt.Errorf("node group %s: attempt %s was rolled back", g.cfg.Name, attempt)
			}
			return nil
		}
		if v.replicas+delta > v.maxSize {
			return fmt.Errorf("node group %s: %d nodes and %d more exceed its maximum of %d", g.cfg.Name, v.replicas, delta, v.maxSize)
		}
		// Bookkeeping first, so that the machines that appeared since the
		// last Sync go to the attempts they belong to, not to Before.
		if err := g.reconcile(ctx, v); err != nil {
			return err
		}
		if n := v.deletingLive(); n > 0 {
			// The MachineSet controller would keep them to make up the
			// new replicas, and create fewer machines than the attempt
			// waits for.
			return fmt.Errorf("node group %s: %d machines are being removed: wait until the MachineSet controller has deleted them", g.cfg.Name, n)
		}
		var before []string
		for _, m := range v.machines {
			if m.attempt == "" && !m.deleting {
				before = append(before, m.name)
			}
		}
		sets, err := g.machineSets(ctx)
		if err != nil {
			return err
		}
		v.state.Pending = append(v.state.Pending, pendingAttempt{ID: attempt, Delta: delta, Before: before, MachineSets: sets})
		return g.update(ctx, v, v.replicas+delta)
	})
	if err != nil {
		return nil, err
	}
	v, nodes, err := g.sync(ctx)
	if err != nil {
		return nil, err
	}
	return v.attempt(attempt, nodes).Nodes, nil
}

// DeleteNodes implements nodegroups.NodeGroup: it has the nodes' Machines
// deleted and lowers spec.replicas by their number. A node that is gone, or
// whose machine is already being removed, is skipped. It changes nothing
// and fails if a node exists but is not of a machine of the group, if the
// group would fall below MinSize, or if the group has fewer machines than
// replicas (retry once the machines exist).
func (g *Group) DeleteNodes(ctx context.Context, names []string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v, _, err := g.sync(ctx)
		if err != nil {
			return err
		}
		byNode := map[string]*machine{}
		for _, m := range v.machines {
			if m.nodeName != "" && (byNode[m.nodeName] == nil || byNode[m.nodeName].deleting) {
				byNode[m.nodeName] = m
			}
		}
		var targets []*machine
		var errs []error
		for _, name := range names {
			m := byNode[name]
			if m == nil {
				_, err := g.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err):
				case err != nil:
					errs = append(errs, err)
				default:
					errs = append(errs, fmt.Errorf("node %s is not of a machine of node group %s (MachineDeployment %s/%s)", name, g.cfg.Name, g.cfg.Namespace, g.cfg.MachineDeployment))
				}
				continue
			}
			if m.deleting || v.state.isDeleting(m.name) || slices.Contains(targets, m) {
				continue
			}
			targets = append(targets, m)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("node group %s: nothing deleted: %w", g.cfg.Name, err)
		}
		if len(targets) == 0 {
			return nil
		}
		return g.shrink(ctx, v, targets, 0, "")
	})
}

// RollBack implements nodegroups.AttemptRollbacker: it removes exactly the
// machines of the attempt, with nodes or not, and the machines of it not
// created yet; an attempt the group has no record of is no error. Machines
// of the attempt that exist are removed as by DeleteNodes; spec.replicas is
// lowered by those and by the attempt's machines not created yet, in one
// update. Should the MachineSet controller create one of the latter at that
// very moment, it chooses which surplus machine to delete by its
// deletePolicy.
func (g *Group) RollBack(ctx context.Context, attempt string) error {
	if err := checkAttempt(attempt); err != nil {
		return fmt.Errorf("node group %s: %w", g.cfg.Name, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v, _, err := g.sync(ctx)
		if err != nil {
			return err
		}
		var targets []*machine
		for _, m := range v.machines {
			if m.attempt == attempt && !m.deleting && !v.state.isDeleting(m.name) {
				targets = append(targets, m)
			}
		}
		waiting := v.waiting(attempt)
		if len(targets) == 0 && waiting == 0 {
			if v.state.pending(attempt) == nil {
				return nil
			}
			v.state.finish(attempt, true)
			return g.update(ctx, v, v.replicas)
		}
		return g.shrink(ctx, v, targets, waiting, attempt)
	})
}

// shrink has targets deleted and lowers replicas by their number and
// extra, ending attempt rollBack if set.
func (g *Group) shrink(ctx context.Context, v *view, targets []*machine, extra int, rollBack string) error {
	replicas := v.replicas - len(targets) - extra
	if replicas < v.minSize {
		return fmt.Errorf("node group %s: removing %d of %d nodes would leave fewer than its minimum of %d", g.cfg.Name, len(targets)+extra, v.replicas, v.minSize)
	}
	// After the update the MachineSet controller must have at least as
	// many machines too many as there are machines marked for deletion,
	// or it keeps some marked ones and creates fewer instead.
	live, marked := 0, map[string]bool{}
	for _, m := range v.machines {
		if m.deleting {
			continue
		}
		live++
		if m.marked {
			marked[m.name] = true
		}
	}
	for _, m := range targets {
		marked[m.name] = true
	}
	if live-replicas < len(marked) {
		return fmt.Errorf("node group %s: %d machines for %d replicas, of which %d to delete: wait until the MachineSet controller has created the machines it lacks", g.cfg.Name, live, v.replicas, len(marked))
	}
	var newlyMarked []*machine
	for _, m := range targets {
		if m.marked && m.ours {
			continue
		}
		patch := metadataPatch(m.uid, "annotations", map[string]any{AnnotationDeleteMachine: "", AnnotationDeleteRequested: g.cfg.Name})
		if err := g.patchMachine(ctx, m.name, patch); err != nil {
			g.unmark(ctx, newlyMarked)
			return fmt.Errorf("node group %s: marking machine %s for deletion: %w", g.cfg.Name, m.name, err)
		}
		m.marked, m.ours = true, true
		newlyMarked = append(newlyMarked, m)
	}
	for _, m := range targets {
		v.state.Deleting = append(v.state.Deleting, m.name)
	}
	if rollBack != "" {
		v.state.finish(rollBack, true)
	}
	err := g.update(ctx, v, replicas)
	if err != nil && !apierrors.IsConflict(err) {
		// A conflict is retried with the marks in place; anything else
		// takes them back (best effort: Sync takes back what is left).
		g.unmark(ctx, newlyMarked)
	}
	return err
}

// unmark takes back the deletion requests of machines.
func (g *Group) unmark(ctx context.Context, machines []*machine) {
	for _, m := range machines {
		patch := metadataPatch(m.uid, "annotations", map[string]any{AnnotationDeleteMachine: nil, AnnotationDeleteRequested: nil})
		if err := g.patchMachine(ctx, m.name, patch); err == nil || apierrors.IsNotFound(err) {
			m.marked, m.ours = false, false
		}
	}
}

func checkAttempt(attempt string) error {
	if msgs := validation.IsValidLabelValue(attempt); attempt == "" || len(msgs) > 0 {
		return fmt.Errorf("attempt %q is not a label value", attempt)
	}
	return nil
}
