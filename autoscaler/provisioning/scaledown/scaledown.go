// Package scaledown is gantry-provisioner's scale-down loop: it removes
// the nodes the provisioner's atomic scale-ups added (they carry the
// attempt label, nodegroups.LabelAttempt) once nothing has kept them for
// ScaleDown.UnneededTime. What keeps a node is the provisioning
// Reconciler's to say (provisioning.HoldsNode, NodesInUse, BookedNodes,
// InFlightAttempts, in provisioning's nodeuse.go); this package decides
// when to remove a node and how: it is tainted (TaintToBeDeleted), left
// for TaintGrace so that bindings the scheduler decided before it saw the
// taint commit, looked at again through the API (pods bound or nominated
// there, Reservations), and only then deleted through its node group. The
// time a node has been unneeded is kept on the node
// (AnnotationUnneededSince), so leader changes do not restart it.
package scaledown

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	"github.com/gantry-dev/gantry/internal/plant"
)

// What scale-down writes on the nodes it looks at. They are a node's, not
// a ProvisioningRequest's (whose vocabulary is provisioning's
// conditions.go).
const (
	// TaintToBeDeleted is put on a node scale-down is about to delete, so
	// that no pod is scheduled there meanwhile.
	TaintToBeDeleted = "autoscaling.gantry.dev/to-be-deleted"
	// AnnotationUnneededSince is on a node scale-down looks at: since when
	// (RFC 3339) it has been unneeded. Only the provisioner writes it
	// (nodes are cluster-scoped: tenants cannot); it is removed when the
	// node is needed again.
	AnnotationUnneededSince = "autoscaling.gantry.dev/unneeded-since"
	// ReasonScaleDown is the event of a node removed.
	ReasonScaleDown = "ScaleDown"
)

var nodesScaledDown = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "gantry_provisioning_nodes_scaled_down_total",
	Help: "Nodes the provisioner created and removed once unneeded, by node group.",
}, []string{"node_group"})

func init() { metrics.Registry.MustRegister(nodesScaledDown) }

// DefaultTaintGrace is ScaleDown.TaintGrace's default.
const DefaultTaintGrace = 5 * time.Second

// ScaleDown removes the nodes the provisioner created (they carry a
// scale-up attempt label) once they have been unneeded, that is empty and
// unbooked, for UnneededTime. It never removes a node no node group owns,
// a node without the attempt label, a node of a scale-up still in flight,
// or nodes that would take a group below its minimum size.
//
// It reads the cluster through the provisioning Reconciler's caches,
// clients and provider, and asks it what keeps a node.
type ScaleDown struct {
	*provisioning.Reconciler
	UnneededTime time.Duration
	Interval     time.Duration
	// TaintGrace is how long nodes stay tainted before they are looked at
	// again through the API and removed (0: DefaultTaintGrace): a pod or
	// booking that the scheduler placed there before it saw the taint has
	// its binding committed by then.
	TaintGrace time.Duration
	// wait waits d or until ctx ends (nil: a timer; tests replace it).
	wait func(ctx context.Context, d time.Duration) error

	mu sync.Mutex
	// unneededSince is when each node was first seen unneeded. It is
	// mirrored in the node's AnnotationUnneededSince, which a new leader
	// reads back, so leader changes do not restart the wait.
	unneededSince map[string]time.Time
	// removed are nodes whose removal the provider took (a cloud provider
	// deletes the node some time later): not removed twice.
	removed map[string]bool
}

// Start runs scale-down until ctx ends (a controller-runtime Runnable; it
// runs on the leader only).
func (s *ScaleDown) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("scale-down")
	ctx = klog.NewContext(ctx, logger)
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if s.Synced != nil && !s.Synced() {
			continue
		}
		if err := s.RunOnce(ctx); err != nil {
			logger.Error(err, "Scale-down")
		}
	}
}

// RunOnce looks at every node once and removes those unneeded for long
// enough.
func (s *ScaleDown) RunOnce(ctx context.Context) error {
	if s.Provider == nil {
		return nil
	}
	if err := nodegroups.Refresh(ctx, s.Provider); err != nil {
		return err
	}
	sel := labels.NewSelector()
	req, err := labels.NewRequirement(nodegroups.LabelAttempt, selection.Exists, nil)
	if err != nil {
		return err
	}
	nodes, err := s.Nodes.List(sel.Add(*req))
	if err != nil {
		return err
	}
	used, err := s.NodesInUse(ctx, "")
	if err != nil {
		return err
	}
	inFlight, err := s.InFlightAttempts(ctx, "")
	if err != nil {
		return err
	}
	now := s.Clock.Now()
	s.mu.Lock()
	if s.unneededSince == nil {
		s.unneededSince, s.removed = map[string]time.Time{}, map[string]bool{}
	}
	seen := map[string]bool{}
	due := map[nodegroups.NodeGroup][]string{}
	// Nodes a pass tainted and did not remove (it failed, or the
	// provisioner restarted since): the taint goes unless they are due.
	var stale []string
	// Nodes whose AnnotationUnneededSince is to be set (to the time) or
	// removed ("").
	mark := map[string]string{}
	for _, n := range nodes {
		seen[n.Name] = true
		if s.removed[n.Name] {
			continue
		}
		g, ok := s.Provider.NodeGroupForNode(n)
		if !ok || used[n.Name] || inFlight[n.Labels[nodegroups.LabelAttempt]] || !n.DeletionTimestamp.IsZero() {
			delete(s.unneededSince, n.Name)
			if _, marked := n.Annotations[AnnotationUnneededSince]; marked && n.DeletionTimestamp.IsZero() {
				mark[n.Name] = ""
			}
			if n.DeletionTimestamp.IsZero() && hasTaint(n, TaintToBeDeleted) {
				stale = append(stale, n.Name)
			}
			continue
		}
		since, ok := s.unneededSince[n.Name]
		if !ok {
			// A new leader (or a restart) goes on from where the last
			// one was; a time in the future is not believed.
			since = now
			if t, err := time.Parse(time.RFC3339, n.Annotations[AnnotationUnneededSince]); err == nil && !t.After(now) {
				since = t
			} else {
				mark[n.Name] = now.UTC().Format(time.RFC3339)
			}
			s.unneededSince[n.Name] = since
		}
		if now.Sub(since) >= s.UnneededTime {
			due[g] = append(due[g], n.Name)
		} else if hasTaint(n, TaintToBeDeleted) {
			stale = append(stale, n.Name)
		}
	}
	for name := range s.unneededSince {
		if !seen[name] {
			delete(s.unneededSince, name)
		}
	}
	for name := range s.removed {
		if !seen[name] {
			delete(s.removed, name)
		}
	}
	s.mu.Unlock()

	var errs []error
	for name, since := range mark {
		errs = append(errs, s.markUnneeded(ctx, name, since))
	}
	for _, name := range stale {
		errs = append(errs, s.untaint(ctx, name))
	}
	for g, names := range due {
		if err := s.removeNodes(ctx, g, names); err != nil {
			errs = append(errs, fmt.Errorf("node group %s: %w", g.ID(), err))
		}
	}
	return errors.Join(errs...)
}

// removeNodes deletes unneeded nodes of g, down to its minimum size. They
// are tainted first; after TaintGrace, so that a binding or a booking the
// scheduler decided before it saw the taint has been committed, their pods
// and the Reservations are listed again through the API (not the cache),
// and a node that holds either is kept. So is a node a pending pod has
// been nominated to: a pod or Reservation that tolerates every taint
// (operator Exists without a key) is not kept off by the taint.
func (s *ScaleDown) removeNodes(ctx context.Context, g nodegroups.NodeGroup, names []string) error {
	if plant.ScaleDown {
		return nil
	}
	size, err := g.TargetSize(ctx)
	if err != nil {
		return err
	}
	sort.Strings(names)
	names = names[:max(0, min(len(names), size-g.MinSize()))]
	var errs []error
	tainted := make([]v1.Node, 0, len(names))
	for _, name := range names {
		var node v1.Node
		if err := s.APIReader.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		if !hasTaint(&node, TaintToBeDeleted) {
			node.Spec.Taints = append(node.Spec.Taints, v1.Taint{Key: TaintToBeDeleted, Effect: v1.TaintEffectNoSchedule})
			if err := s.Client.Update(ctx, &node); err != nil {
				errs = append(errs, fmt.Errorf("tainting node %s: %w", name, err))
				continue
			}
		}
		tainted = append(tainted, node)
	}
	if len(tainted) == 0 {
		return errors.Join(errs...)
	}
	if err := s.sleep(ctx, s.taintGrace()); err != nil {
		return errors.Join(append(errs, err)...)
	}
	booked, err := s.BookedNodes(ctx, true, "")
	if err != nil {
		// Left tainted: the next pass takes the taint off or goes on.
		return errors.Join(append(errs, err)...)
	}
	for i := range tainted {
		node := &tainted[i]
		name := node.Name
		why, err := s.holds(ctx, name, booked)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if why != "" {
			klog.FromContext(ctx).V(2).Info("Node got used while being removed; keeping it", "node", name, "by", why)
			s.mu.Lock()
			delete(s.unneededSince, name)
			s.mu.Unlock()
			errs = append(errs, s.untaint(ctx, name), s.markUnneeded(ctx, name, ""))
			continue
		}
		if err := g.DeleteNodes(ctx, []string{name}); err != nil {
			// Left as it was: usable again, and tried again next pass.
			errs = append(errs, err, s.untaint(ctx, name))
			continue
		}
		s.mu.Lock()
		s.removed[name] = true
		s.mu.Unlock()
		nodesScaledDown.WithLabelValues(g.ID()).Inc()
		s.Recorder.Eventf(node, v1.EventTypeNormal, ReasonScaleDown, "Node group %s: removed node %s, unneeded for %s", g.ID(), name, s.UnneededTime)
		klog.FromContext(ctx).V(2).Info("Scaled down", "nodeGroup", g.ID(), "node", name)
	}
	return errors.Join(errs...)
}

// holds says what, read through the API, keeps node name: a pod on it, a
// pending pod nominated to it, or a booking (booked); "" for nothing.
func (s *ScaleDown) holds(ctx context.Context, name string, booked map[string]bool) (string, error) {
	if booked[name] {
		return "a booking", nil
	}
	var pods v1.PodList
	if err := s.APIReader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", name)}); err != nil {
		return "", fmt.Errorf("listing the pods of node %s: %w", name, err)
	}
	if i := slices.IndexFunc(pods.Items, func(p v1.Pod) bool { return provisioning.HoldsNode(&p) }); i >= 0 {
		return "pod " + pods.Items[i].Namespace + "/" + pods.Items[i].Name, nil
	}
	if err := s.APIReader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("status.nominatedNodeName", name)}); err != nil {
		return "", fmt.Errorf("listing the pods nominated to node %s: %w", name, err)
	}
	if i := slices.IndexFunc(pods.Items, func(p v1.Pod) bool { return p.Spec.NodeName == "" && provisioning.HoldsNode(&p) }); i >= 0 {
		return "nominated pod " + pods.Items[i].Namespace + "/" + pods.Items[i].Name, nil
	}
	return "", nil
}

func (s *ScaleDown) taintGrace() time.Duration {
	if s.TaintGrace > 0 {
		return s.TaintGrace
	}
	return DefaultTaintGrace
}

func (s *ScaleDown) sleep(ctx context.Context, d time.Duration) error {
	if s.wait != nil {
		return s.wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// markUnneeded sets the node's AnnotationUnneededSince to since, or
// removes it when since is "".
func (s *ScaleDown) markUnneeded(ctx context.Context, name, since string) error {
	value := "null"
	if since != "" {
		value = strconv.Quote(since)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, AnnotationUnneededSince, value)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := s.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("marking node %s unneeded since %q: %w", name, since, err)
	}
	return nil
}

func (s *ScaleDown) untaint(ctx context.Context, name string) error {
	var node v1.Node
	if err := s.APIReader.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return client.IgnoreNotFound(err)
	}
	kept := node.Spec.Taints[:0]
	for _, t := range node.Spec.Taints {
		if t.Key != TaintToBeDeleted {
			kept = append(kept, t)
		}
	}
	node.Spec.Taints = kept
	return s.Client.Update(ctx, &node)
}

func hasTaint(n *v1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}
