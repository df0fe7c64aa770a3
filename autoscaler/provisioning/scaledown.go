package provisioning

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// TaintToBeDeleted is put on a node scale-down is about to delete, so that
// no pod is scheduled there meanwhile.
const TaintToBeDeleted = "autoscaling.gantry.dev/to-be-deleted"

// AnnotationUnneededSince is on a node scale-down looks at: since when
// (RFC 3339) it has been unneeded. Only the provisioner writes it (nodes
// are cluster-scoped: tenants cannot); it is removed when the node is
// needed again.
const AnnotationUnneededSince = "autoscaling.gantry.dev/unneeded-since"

// DefaultTaintGrace is ScaleDown.TaintGrace's default.
const DefaultTaintGrace = 5 * time.Second

// ScaleDown removes the nodes the provisioner created (they carry a
// scale-up attempt label) once they have been unneeded, that is empty and
// unbooked, for UnneededTime. It never removes a node no node group owns,
// a node without the attempt label, a node of a scale-up still in flight,
// or nodes that would take a group below its minimum size.
type ScaleDown struct {
	*Reconciler
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
	booked, err := s.bookedNodes(ctx, true, "")
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
		s.Recorder.Eventf(node, v1.EventTypeNormal, "ScaleDown", "Node group %s: removed node %s, unneeded for %s", g.ID(), name, s.UnneededTime)
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
	if i := slices.IndexFunc(pods.Items, func(p v1.Pod) bool { return holdsNode(&p) }); i >= 0 {
		return "pod " + pods.Items[i].Namespace + "/" + pods.Items[i].Name, nil
	}
	if err := s.APIReader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("status.nominatedNodeName", name)}); err != nil {
		return "", fmt.Errorf("listing the pods nominated to node %s: %w", name, err)
	}
	if i := slices.IndexFunc(pods.Items, func(p v1.Pod) bool { return p.Spec.NodeName == "" && holdsNode(&p) }); i >= 0 {
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
// (a Reservation placed there or pinned to it), but except's own, as the
// caches show them.
func (r *Reconciler) nodesInUse(ctx context.Context, except *provv1.ProvisioningRequest) (map[string]bool, error) {
	var uid types.UID
	if except != nil {
		uid = except.UID
	}
	used, err := r.bookedNodes(ctx, false, uid)
	if err != nil {
		return nil, err
	}
	pods, err := r.Pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" && holdsNode(p) {
			used[p.Spec.NodeName] = true
		}
	}
	return used, nil
}

// bookedNodes are the nodes that hold a booking (a Reservation placed there
// or pinned to it), but those of the request of UID except, read from the
// cache to find candidates (live false), through the API reader just
// before a node is deleted (live true).
func (r *Reconciler) bookedNodes(ctx context.Context, live bool, except types.UID) (map[string]bool, error) {
	var rs schedv1alpha1.ReservationList
	reader, opts := client.Reader(r.Client), []client.ListOption{client.UnsafeDisableDeepCopy}
	if live && r.APIReader != nil {
		reader, opts = r.APIReader, nil
	}
	used := map[string]bool{}
	if err := reader.List(ctx, &rs, opts...); CRDMissing(err) {
		// No booking exists without the Reservation CRD.
		return used, nil
	} else if err != nil {
		return nil, fmt.Errorf("listing the Reservations: %w", err)
	}
	for i := range rs.Items {
		res := &rs.Items[i]
		if except != "" && res.Labels[LabelRequestUID] == string(except) {
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

// CRDMissing reports whether err, from a list, says that the resource is
// not served: its CustomResourceDefinition is not installed, so none of its
// objects exists (a collection is otherwise never NotFound).
func CRDMissing(err error) bool {
	return err != nil && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err))
}
