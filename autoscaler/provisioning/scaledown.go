package provisioning

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// TaintToBeDeleted is put on a node scale-down is about to delete, so that
// no pod is scheduled there meanwhile.
const TaintToBeDeleted = "autoscaling.gantry.dev/to-be-deleted"

// ScaleDown removes the nodes the provisioner created (they carry a
// scale-up attempt label) once they have been unneeded, that is empty and
// unbooked, for UnneededTime. It never removes a node no node group owns,
// a node without the attempt label, a node of a scale-up still in flight,
// or nodes that would take a group below its minimum size.
type ScaleDown struct {
	*Reconciler
	UnneededTime time.Duration
	Interval     time.Duration

	mu sync.Mutex
	// unneededSince is when each node was first seen unneeded. It is kept
	// in memory only: a restart makes every node wait the full time again.
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
	if err := s.refresh(ctx); err != nil {
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
	used, err := s.nodesInUse(ctx, nil)
	if err != nil {
		return err
	}
	inFlight, err := s.inFlightAttempts(ctx, nil)
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
	for _, n := range nodes {
		seen[n.Name] = true
		if s.removed[n.Name] {
			continue
		}
		g, ok := s.Provider.NodeGroupForNode(n)
		if !ok || used[n.Name] || inFlight[n.Labels[nodegroups.LabelAttempt]] || !n.DeletionTimestamp.IsZero() {
			delete(s.unneededSince, n.Name)
			if n.DeletionTimestamp.IsZero() && hasTaint(n, TaintToBeDeleted) {
				stale = append(stale, n.Name)
			}
			continue
		}
		since, ok := s.unneededSince[n.Name]
		if !ok {
			s.unneededSince[n.Name], since = now, now
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

// removeNodes deletes unneeded nodes of g, down to its minimum size: each
// is tainted first and looked at again through the API, so a pod the
// scheduler placed meanwhile keeps its node.
func (s *ScaleDown) removeNodes(ctx context.Context, g nodegroups.NodeGroup, names []string) error {
	size, err := g.TargetSize(ctx)
	if err != nil {
		return err
	}
	sort.Strings(names)
	names = names[:max(0, min(len(names), size-g.MinSize()))]
	var errs []error
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
		var pods v1.PodList
		if err := s.APIReader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", name)}); err != nil {
			errs = append(errs, err)
			continue
		}
		if slices.ContainsFunc(pods.Items, func(p v1.Pod) bool { return holdsNode(&p) }) {
			klog.FromContext(ctx).V(2).Info("Node got a pod while being removed; keeping it", "node", name)
			s.mu.Lock()
			delete(s.unneededSince, name)
			s.mu.Unlock()
			errs = append(errs, s.untaint(ctx, name))
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
		s.Recorder.Eventf(&node, v1.EventTypeNormal, "ScaleDown", "Node group %s: removed node %s, unneeded for %s", g.ID(), name, s.UnneededTime)
		klog.FromContext(ctx).V(2).Info("Scaled down", "nodeGroup", g.ID(), "node", name)
	}
	return errors.Join(errs...)
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

// holdsNode reports whether a pod keeps its node from being unneeded: any
// pod not terminated, but DaemonSet and mirror pods, which every node has.
func holdsNode(p *v1.Pod) bool {
	if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[v1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

// nodesInUse are the nodes that hold a pod (see holdsNode) or a booking
// (a Reservation placed there or pinned to it), but except's own.
func (r *Reconciler) nodesInUse(ctx context.Context, except *provv1.ProvisioningRequest) (map[string]bool, error) {
	used := map[string]bool{}
	pods, err := r.Pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" && holdsNode(p) {
			used[p.Spec.NodeName] = true
		}
	}
	var rs schedv1alpha1.ReservationList
	if err := r.Client.List(ctx, &rs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range rs.Items {
		res := &rs.Items[i]
		if except != nil && res.Labels[LabelRequestUID] == string(except.UID) {
			continue
		}
		switch res.Status.Phase {
		case schedv1alpha1.ReservationAvailable:
			used[res.Status.NodeName] = true
		case "", schedv1alpha1.ReservationPending:
			if res.Spec.Template.NodeName != "" {
				used[res.Spec.Template.NodeName] = true
			}
		}
	}
	return used, nil
}
