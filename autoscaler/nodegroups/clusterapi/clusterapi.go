// Package clusterapi is a node-group provider of Cluster API machines: each
// group is one MachineDeployment (cluster.x-k8s.io/v1beta1), named in a
// configuration file. Objects are read and written as unstructured objects
// through the dynamic client, so no Cluster API Go module is needed.
//
// # Sizes
//
// TargetSize is the MachineDeployment's spec.replicas. MinSize and MaxSize
// come from the configuration; a bound the configuration leaves out is read
// from the MachineDeployment's annotation AnnotationMinSize or
// AnnotationMaxSize (the ones cluster-autoscaler reads). The configuration
// wins where both are set. Annotations are read again on every call that
// reads the MachineDeployment, so MinSize and MaxSize report the last value
// read.
//
// # Attempts
//
// Cluster API names machines at random when its MachineSet controller
// creates them, after the provider has raised spec.replicas. The provider
// therefore records each scale-up attempt in the MachineDeployment's
// annotation AnnotationState, written in the same optimistic-concurrency
// update (resourceVersion) as the new replica count: the attempt's name, its
// size, and the names of the machines that had no attempt yet when it began.
// A machine of the MachineDeployment that appears later without the label
// nodegroups.LabelAttempt belongs to the oldest pending attempt that still
// lacks machines and did not see it before. Sync labels it with
// nodegroups.LabelAttempt and nodegroups.LabelNodeGroup and counts it; an
// attempt with all its machines labelled is finished, and from then on the
// machine labels alone say which machines it made.
//
// Cluster API copies only a few label domains from a Machine to its Node,
// and not autoscaling.gantry.dev. So Sync also labels the Nodes itself: once
// a machine has status.nodeRef, its Node gets nodegroups.LabelNodeGroup and,
// for a machine of an attempt, nodegroups.LabelAttempt. Nodes of machines
// that predate the provider get only the group label. Sync runs within
// Nodes, IncreaseSize, DeleteNodes, RollBack and Attempt; a caller that
// waits for the nodes of an attempt by their labels should call
// Provider.Refresh (which the provisioner does before it looks for them),
// or Nodes or Sync, periodically.
//
// IncreaseSize returns the names of the attempt's Nodes that exist when it
// returns, which right after the scale-up is usually none: Cluster API
// creates machines and nodes later. Calling IncreaseSize again with the same
// attempt and size scales nothing more and returns the nodes that exist
// by then; Attempt reports the machines, nodes and machines still to come.
//
// # Removing machines
//
// DeleteNodes finds each node's Machine by status.nodeRef, annotates it
// AnnotationDeleteMachine (the MachineSet controller deletes annotated
// machines first when it has more machines than replicas) and lowers
// spec.replicas by the number of machines in one optimistic-concurrency
// update, which also lists them in AnnotationState so that a retried call
// does not lower it twice. It refuses, changing nothing, a node of another
// group, a size below MinSize, and a removal while the MachineSet controller
// has fewer machines than replicas (it would then create fewer machines
// rather than delete the annotated ones). RollBack removes an attempt's
// machines the same way whether or not they have nodes, and lowers
// spec.replicas as well by the machines of the attempt not created yet.
//
// The provider must be the only writer of spec.replicas of its
// MachineDeployments (not cluster-autoscaler as well), and one process at a
// time should run it (leader election): a group serializes its own calls,
// and the MachineDeployment's resourceVersion guards every replica change,
// but machine labelling is not guarded across processes.
package clusterapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

// Cluster API names the provider reads and writes.
const (
	// AnnotationMinSize and AnnotationMaxSize on a MachineDeployment bound
	// its group when the configuration does not.
	AnnotationMinSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	AnnotationMaxSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
	// AnnotationDeleteMachine on a Machine makes the MachineSet controller
	// delete it first when it scales down.
	AnnotationDeleteMachine = "cluster.x-k8s.io/delete-machine"
	// AnnotationMachine and AnnotationClusterNamespace on a Node name its
	// Machine and the Machine's namespace (Cluster API sets them).
	AnnotationMachine          = "cluster.x-k8s.io/machine"
	AnnotationClusterNamespace = "cluster.x-k8s.io/cluster-namespace"
	// LabelDeploymentName on a Machine names its MachineDeployment.
	LabelDeploymentName = "cluster.x-k8s.io/deployment-name"
)

// Names of the provider's own.
const (
	// AnnotationState on a MachineDeployment holds the group's pending
	// scale-up attempts and the machines it is removing (JSON).
	AnnotationState = "autoscaling.gantry.dev/node-group-state"
	// AnnotationDeleteRequested on a Machine, next to
	// AnnotationDeleteMachine, says the provider set that annotation (the
	// value is the group), so that it can take back a request that did not
	// go through.
	AnnotationDeleteRequested = "autoscaling.gantry.dev/delete-requested"
)

// Resources of Cluster API.
var (
	MachineDeploymentResource = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machinedeployments"}
	MachineResource           = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}
)

// finishedKept is how many finished attempts the state remembers, so that a
// retried IncreaseSize of one is not taken for a new attempt.
const finishedKept = 64

// lookupTimeout bounds the Machine read of NodeGroupForNode.
const lookupTimeout = 10 * time.Second

// Provider is the Cluster API node-group provider.
type Provider struct {
	groups []*Group
	byName map[string]*Group
	dyn    dynamic.Interface
}

var _ nodegroups.Provider = &Provider{}

// New returns the provider of c's groups. It reads the MachineDeployment of
// every group whose size bounds the configuration leaves out, and fails if
// one is missing or its annotations do not give valid bounds.
func New(ctx context.Context, c *Config, dyn dynamic.Interface, kube kubernetes.Interface) (*Provider, error) {
	p := &Provider{byName: map[string]*Group{}, dyn: dyn}
	var errs []error
	for _, cfg := range c.NodeGroups {
		g := &Group{cfg: cfg, dyn: dyn, kube: kube}
		if cfg.MinSize != nil && cfg.MaxSize != nil {
			g.minSize.Store(int64(*cfg.MinSize))
			g.maxSize.Store(int64(*cfg.MaxSize))
		} else if _, err := g.getDeployment(ctx); err != nil {
			errs = append(errs, fmt.Errorf("node group %s: %w", cfg.Name, err))
		}
		p.groups = append(p.groups, g)
		p.byName[cfg.Name] = g
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// NodeGroups implements nodegroups.Provider.
func (p *Provider) NodeGroups() []nodegroups.NodeGroup {
	out := make([]nodegroups.NodeGroup, len(p.groups))
	for i, g := range p.groups {
		out[i] = g
	}
	return out
}

// Group is the group of that name, or nil.
func (p *Provider) Group(name string) *Group { return p.byName[name] }

// Refresh brings the labels of every group's machines and nodes up to
// date: it runs Sync. It is what the provisioner calls before it looks for
// an attempt's nodes by nodegroups.LabelAttempt, since Cluster API creates
// them after IncreaseSize returns and does not label them.
func (p *Provider) Refresh(ctx context.Context) error { return p.Sync(ctx) }

// Sync runs Group.Sync on every group.
func (p *Provider) Sync(ctx context.Context) error {
	var errs []error
	for _, g := range p.groups {
		errs = append(errs, g.Sync(ctx))
	}
	return errors.Join(errs...)
}

// NodeGroupForNode implements nodegroups.Provider. A node annotated with
// its Machine (AnnotationMachine, which Cluster API sets) belongs to the
// group of the Machine's MachineDeployment, and to none if the Machine is
// gone, belongs to another MachineDeployment or points at another node. The
// Machine is looked up among those the groups last listed, else read from
// the API. Only a node without that annotation, or whose Machine cannot be
// read, is placed by its nodegroups.LabelNodeGroup label.
func (p *Provider) NodeGroupForNode(n *v1.Node) (nodegroups.NodeGroup, bool) {
	if machine := n.Annotations[AnnotationMachine]; machine != "" {
		if g, decided := p.groupOfMachine(n, machine); decided {
			if g == nil {
				return nil, false
			}
			return g, true
		}
	}
	if g := p.byName[n.Labels[nodegroups.LabelNodeGroup]]; g != nil {
		return g, true
	}
	return nil, false
}

// groupOfMachine is the group of node n's machine; decided is false when
// the machine could not be read.
func (p *Provider) groupOfMachine(n *v1.Node, machine string) (g *Group, decided bool) {
	var namespaces []string
	if ns := n.Annotations[AnnotationClusterNamespace]; ns != "" {
		namespaces = []string{ns}
	} else {
		for _, g := range p.groups {
			if !slices.Contains(namespaces, g.cfg.Namespace) {
				namespaces = append(namespaces, g.cfg.Namespace)
			}
		}
	}
	for _, ns := range namespaces {
		for _, g := range p.groups {
			if g.cfg.Namespace == ns && g.knownMachineNode(machine) == n.Name {
				return g, true
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	decided = true
	for _, ns := range namespaces {
		obj, err := p.dyn.Resource(MachineResource).Namespace(ns).Get(ctx, machine, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			decided = false
			continue
		}
		m := newMachine(obj)
		if m.nodeName != "" && m.nodeName != n.Name {
			return nil, true
		}
		md := obj.GetLabels()[LabelDeploymentName]
		for _, g := range p.groups {
			if g.cfg.Namespace == ns && g.cfg.MachineDeployment == md {
				return g, true
			}
		}
		return nil, true
	}
	return nil, decided
}

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
		v.state.Pending = append(v.state.Pending, pendingAttempt{ID: attempt, Delta: delta, Before: before})
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

// state is the group's bookkeeping in AnnotationState.
type state struct {
	// Group is the node group that manages the MachineDeployment.
	Group string `json:"group"`
	// Pending are the attempts not all of whose machines are labelled,
	// oldest first.
	Pending []pendingAttempt `json:"pending,omitempty"`
	// Finished are the last attempts whose machines were all labelled or
	// that were rolled back, oldest first.
	Finished []finishedAttempt `json:"finished,omitempty"`
	// Deleting are machines marked for deletion whose replica is already
	// taken off spec.replicas.
	Deleting []string `json:"deleting,omitempty"`
}

type pendingAttempt struct {
	ID    string `json:"id"`
	Delta int    `json:"delta"`
	// Labelled counts the machines labelled with the attempt so far.
	Labelled int `json:"labelled,omitempty"`
	// Before are the machines without an attempt when this one began.
	Before []string `json:"before,omitempty"`
}

type finishedAttempt struct {
	ID         string `json:"id"`
	RolledBack bool   `json:"rolledBack,omitempty"`
}

func (s *state) pending(id string) *pendingAttempt {
	for i := range s.Pending {
		if s.Pending[i].ID == id {
			return &s.Pending[i]
		}
	}
	return nil
}

func (s *state) finished(id string) *finishedAttempt {
	for i := range s.Finished {
		if s.Finished[i].ID == id {
			return &s.Finished[i]
		}
	}
	return nil
}

func (s *state) isDeleting(machine string) bool { return slices.Contains(s.Deleting, machine) }

// finish moves an attempt from pending to finished.
func (s *state) finish(id string, rolledBack bool) {
	s.Pending = slices.DeleteFunc(s.Pending, func(p pendingAttempt) bool { return p.ID == id })
	if f := s.finished(id); f != nil {
		f.RolledBack = f.RolledBack || rolledBack
		return
	}
	s.Finished = append(s.Finished, finishedAttempt{ID: id, RolledBack: rolledBack})
	if len(s.Finished) > finishedKept {
		s.Finished = s.Finished[len(s.Finished)-finishedKept:]
	}
}

// deployment is a MachineDeployment as read.
type deployment struct {
	obj              *unstructured.Unstructured
	replicas         int
	minSize, maxSize int
	state            state
}

// view is a MachineDeployment and its machines as read.
type view struct {
	deployment
	// machines, oldest first.
	machines []*machine
}

type machine struct {
	name, uid string
	// attempt is the machine's nodegroups.LabelAttempt.
	attempt string
	// nodeName and nodeUID are status.nodeRef's.
	nodeName, nodeUID string
	deleting          bool
	// marked: AnnotationDeleteMachine; ours: AnnotationDeleteRequested.
	marked, ours bool
	created      time.Time
}

func newMachine(obj *unstructured.Unstructured) *machine {
	nodeName, _, _ := unstructured.NestedString(obj.Object, "status", "nodeRef", "name")
	nodeUID, _, _ := unstructured.NestedString(obj.Object, "status", "nodeRef", "uid")
	_, marked := obj.GetAnnotations()[AnnotationDeleteMachine]
	_, ours := obj.GetAnnotations()[AnnotationDeleteRequested]
	return &machine{
		name:     obj.GetName(),
		uid:      string(obj.GetUID()),
		attempt:  obj.GetLabels()[nodegroups.LabelAttempt],
		nodeName: nodeName,
		nodeUID:  nodeUID,
		deleting: obj.GetDeletionTimestamp() != nil,
		marked:   marked,
		ours:     ours,
		created:  obj.GetCreationTimestamp().Time,
	}
}

// attempt reports an attempt from the view; nodes are the group's nodes
// by name, or nil.
func (v *view) attempt(id string, nodes map[string]*v1.Node) AttemptStatus {
	var s AttemptStatus
	for _, m := range v.machines {
		if m.attempt != id {
			continue
		}
		s.Known = true
		s.Machines = append(s.Machines, m.name)
		if n := nodes[m.nodeName]; n != nil {
			s.Nodes = append(s.Nodes, n.Name)
		}
	}
	if v.state.pending(id) != nil {
		s.Known = true
		s.Waiting = v.waiting(id)
	}
	if f := v.state.finished(id); f != nil {
		s.Known, s.RolledBack = true, f.RolledBack
	}
	sort.Strings(s.Machines)
	sort.Strings(s.Nodes)
	return s
}

// deletingLive counts the machines whose replica the group took off but
// that the MachineSet controller has not started deleting.
func (v *view) deletingLive() int {
	n := 0
	for _, m := range v.machines {
		if !m.deleting && v.state.isDeleting(m.name) {
			n++
		}
	}
	return n
}

// waiting is how many machines a pending attempt still lacks.
func (v *view) waiting(id string) int {
	p := v.state.pending(id)
	if p == nil {
		return 0
	}
	return max(0, p.Delta-p.Labelled)
}

// getDeployment reads the MachineDeployment and its size bounds.
func (g *Group) getDeployment(ctx context.Context) (*deployment, error) {
	obj, err := g.dyn.Resource(MachineDeploymentResource).Namespace(g.cfg.Namespace).Get(ctx, g.cfg.MachineDeployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading MachineDeployment %s/%s: %w", g.cfg.Namespace, g.cfg.MachineDeployment, err)
	}
	return g.parseDeployment(obj)
}

func (g *Group) parseDeployment(obj *unstructured.Unstructured) (*deployment, error) {
	d := &deployment{obj: obj}
	what := fmt.Sprintf("MachineDeployment %s/%s", g.cfg.Namespace, g.cfg.MachineDeployment)
	replicas, found, err := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if err != nil || !found || replicas < 0 {
		return nil, fmt.Errorf("%s: no valid spec.replicas (found %v, error %v)", what, found, err)
	}
	d.replicas = int(replicas)
	annotations := obj.GetAnnotations()
	bound := func(configured *int, annotation string) (int, error) {
		if configured != nil {
			return *configured, nil
		}
		s, ok := annotations[annotation]
		if !ok {
			return 0, fmt.Errorf("%s: the configuration has no bound and the annotation %s is missing", what, annotation)
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxGroupSize {
			return 0, fmt.Errorf("%s: annotation %s=%q is not an integer between 0 and %d", what, annotation, s, maxGroupSize)
		}
		return n, nil
	}
	minSize, err1 := bound(g.cfg.MinSize, AnnotationMinSize)
	maxSize, err2 := bound(g.cfg.MaxSize, AnnotationMaxSize)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if minSize > maxSize {
		return nil, fmt.Errorf("%s: minimum size %d is above maximum size %d", what, minSize, maxSize)
	}
	d.minSize, d.maxSize = minSize, maxSize
	g.minSize.Store(int64(minSize))
	g.maxSize.Store(int64(maxSize))
	if s, ok := annotations[AnnotationState]; ok {
		if err := json.Unmarshal([]byte(s), &d.state); err != nil {
			return nil, fmt.Errorf("%s: annotation %s: %w", what, AnnotationState, err)
		}
		if d.state.Group != g.cfg.Name {
			return nil, fmt.Errorf("%s is managed by node group %q, not %q (annotation %s)", what, d.state.Group, g.cfg.Name, AnnotationState)
		}
	}
	d.state.Group = g.cfg.Name
	return d, nil
}

// load reads the MachineDeployment and then its machines.
func (g *Group) load(ctx context.Context) (*view, error) {
	d, err := g.getDeployment(ctx)
	if err != nil {
		return nil, err
	}
	list, err := g.dyn.Resource(MachineResource).Namespace(g.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelDeploymentName + "=" + g.cfg.MachineDeployment})
	if err != nil {
		return nil, fmt.Errorf("listing the machines of MachineDeployment %s/%s: %w", g.cfg.Namespace, g.cfg.MachineDeployment, err)
	}
	v := &view{deployment: *d}
	nodes := map[string]string{}
	for i := range list.Items {
		m := newMachine(&list.Items[i])
		v.machines = append(v.machines, m)
		nodes[m.name] = m.nodeName
	}
	sort.Slice(v.machines, func(i, j int) bool {
		a, b := v.machines[i], v.machines[j]
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		return a.name < b.name
	})
	g.machinesMu.Lock()
	g.machineNodes = nodes
	g.machinesMu.Unlock()
	return v, nil
}

// knownMachineNode is the node of a machine of the group as last listed.
func (g *Group) knownMachineNode(machine string) string {
	g.machinesMu.Lock()
	defer g.machinesMu.Unlock()
	return g.machineNodes[machine]
}

// update writes v's state and replicas, guarded by the resourceVersion
// read, and keeps the written object in v.
func (g *Group) update(ctx context.Context, v *view, replicas int) error {
	obj := v.obj.DeepCopy()
	data, err := json.Marshal(v.state)
	if err != nil {
		return err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationState] = string(data)
	obj.SetAnnotations(annotations)
	if err := unstructured.SetNestedField(obj.Object, int64(replicas), "spec", "replicas"); err != nil {
		return err
	}
	out, err := g.dyn.Resource(MachineDeploymentResource).Namespace(g.cfg.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating MachineDeployment %s/%s: %w", g.cfg.Namespace, g.cfg.MachineDeployment, err)
	}
	v.obj, v.replicas = out, replicas
	return nil
}

// metadataPatch is a merge patch of the labels or annotations of an
// object, which fails if the object's UID is not uid (unless uid is empty).
func metadataPatch(uid, field string, values map[string]any) map[string]any {
	meta := map[string]any{field: values}
	if uid != "" {
		meta["uid"] = uid
	}
	return map[string]any{"metadata": meta}
}

// patchMachine applies a merge patch to a machine of the group.
func (g *Group) patchMachine(ctx context.Context, name string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = g.dyn.Resource(MachineResource).Namespace(g.cfg.Namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

// sync loads the group, brings its bookkeeping and labels up to date, and
// returns the view and the nodes of its machines by name.
func (g *Group) sync(ctx context.Context) (*view, map[string]*v1.Node, error) {
	v, err := g.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := g.reconcile(ctx, v); err != nil {
		return nil, nil, err
	}
	nodes, err := g.labelNodes(ctx, v)
	if err != nil {
		return nil, nil, err
	}
	return v, nodes, nil
}

// reconcile labels the machines of pending attempts, finishes complete
// attempts, forgets deleted machines and takes back deletion requests that
// did not go through or that the MachineSet controller will not act on.
func (g *Group) reconcile(ctx context.Context, v *view) error {
	old, err := json.Marshal(v.state)
	if err != nil {
		return err
	}
	st := &v.state
	present := map[string]*machine{}
	live := 0
	for _, m := range v.machines {
		present[m.name] = m
		if !m.deleting {
			live++
		}
	}

	// Deletion requests: forget machines that are gone; take back marks of
	// ours that never made it into the state, and those the MachineSet
	// controller will keep because it has no machine too many.
	st.Deleting = slices.DeleteFunc(st.Deleting, func(name string) bool { return present[name] == nil })
	var takeBack []*machine
	absorbed := v.deletingLive() > 0 && live <= v.replicas
	for _, m := range v.machines {
		if m.deleting || !m.ours {
			continue
		}
		if !st.isDeleting(m.name) || absorbed {
			takeBack = append(takeBack, m)
		}
	}
	if len(takeBack) > 0 {
		g.unmark(ctx, takeBack)
		for _, m := range takeBack {
			if !m.marked {
				st.Deleting = slices.DeleteFunc(st.Deleting, func(name string) bool { return name == m.name })
			}
		}
	}

	// Attempts: hand machines without an attempt to the oldest pending
	// attempt that lacks machines and did not see them before.
	counts := map[string]int{}
	for _, m := range v.machines {
		if m.attempt != "" {
			counts[m.attempt]++
		}
	}
	var done []string
	for i := range st.Pending {
		p := &st.Pending[i]
		p.Labelled = max(p.Labelled, counts[p.ID])
		for _, m := range v.machines {
			if p.Labelled >= p.Delta {
				break
			}
			if m.attempt != "" || m.deleting || m.marked || st.isDeleting(m.name) || slices.Contains(p.Before, m.name) {
				continue
			}
			patch := metadataPatch(m.uid, "labels", map[string]any{nodegroups.LabelAttempt: p.ID, nodegroups.LabelNodeGroup: g.cfg.Name})
			if err := g.patchMachine(ctx, m.name, patch); err != nil {
				return fmt.Errorf("node group %s: labelling machine %s of attempt %s: %w", g.cfg.Name, m.name, p.ID, err)
			}
			m.attempt = p.ID
			p.Labelled++
		}
		if p.Labelled >= p.Delta {
			done = append(done, p.ID)
		}
	}
	for _, id := range done {
		st.finish(id, false)
	}

	now, err := json.Marshal(v.state)
	if err != nil {
		return err
	}
	if string(now) == string(old) && v.obj.GetAnnotations()[AnnotationState] != "" {
		return nil
	}
	if len(st.Pending) == 0 && len(st.Finished) == 0 && len(st.Deleting) == 0 && v.obj.GetAnnotations()[AnnotationState] == "" {
		// Nothing to remember yet: leave the MachineDeployment alone.
		return nil
	}
	return g.update(ctx, v, v.replicas)
}

// labelNodes gives the nodes of the group's machines the group label, and
// those of attempt machines the attempt label, and returns them by name.
func (g *Group) labelNodes(ctx context.Context, v *view) (map[string]*v1.Node, error) {
	list, err := g.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=" + g.cfg.Name})
	if err != nil {
		return nil, fmt.Errorf("node group %s: listing nodes: %w", g.cfg.Name, err)
	}
	labelled := map[string]*v1.Node{}
	for i := range list.Items {
		labelled[list.Items[i].Name] = &list.Items[i]
	}
	out := map[string]*v1.Node{}
	var errs []error
	for _, m := range v.machines {
		if m.nodeName == "" {
			continue
		}
		n := labelled[m.nodeName]
		if n == nil {
			n, err = g.kube.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if m.nodeUID != "" && string(n.UID) != m.nodeUID {
			continue // the node of that name is not the machine's
		}
		want := map[string]any{nodegroups.LabelNodeGroup: g.cfg.Name}
		if m.attempt != "" {
			want[nodegroups.LabelAttempt] = m.attempt
		}
		var patch map[string]any
		for k, value := range want {
			if n.Labels[k] != value {
				patch = metadataPatch(string(n.UID), "labels", want)
			}
		}
		if patch != nil {
			data, err := json.Marshal(patch)
			if err != nil {
				return nil, err
			}
			n, err = g.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				// Gone, or replaced by a node of the same name.
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("labelling node %s: %w", m.nodeName, err))
				continue
			}
		}
		out[n.Name] = n
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("node group %s: %w", g.cfg.Name, err)
	}
	return out, nil
}
