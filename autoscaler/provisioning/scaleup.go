package provisioning

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// What only atomic scale-up classes do. A request whose pods do not fit
// the cluster as it is gets a scale-up planned on the same snapshot, in
// the same turn (planScaleUpFor), and started after (startScaleUp): the attempt is
// recorded on the request (request.recordScaleUp) before its first node
// exists. While it is in flight (request.scaleUpInFlight) serve follows it
// (followScaleUp) until its nodes are Ready, and then books them as any
// class books (booking.go); an attempt that fails is rolled back
// (rollBackAttempt), sparing nodes in use (keepNode). A deleted request's
// unused nodes are removed (removeUnusedNodes).

// readinessPoll is how often an attempt's nodes are looked at while they
// come up.
const readinessPoll = time.Second

// scaleUpPlan is how many nodes to add to each node group.
type scaleUpPlan map[string]int

func (p scaleUpPlan) String() string {
	parts := make([]string, 0, len(p))
	for _, g := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, fmt.Sprintf("%s=%d", g, p[g]))
	}
	return strings.Join(parts, ",")
}

func (p scaleUpPlan) total() int {
	n := 0
	for _, v := range p {
		n += v
	}
	return n
}

// parsePlan reads a plan annotation.
func parsePlan(s string) (scaleUpPlan, error) {
	p := scaleUpPlan{}
	for _, part := range strings.Split(s, ",") {
		g, n, ok := strings.Cut(part, "=")
		v, err := strconv.Atoi(n)
		if !ok || g == "" || err != nil || v < 1 || p[g] != 0 {
			return nil, fmt.Errorf("malformed scale-up plan %q", s)
		}
		p[g] = v
	}
	return p, nil
}

// noGroupFits is a pod set whose pod fits no node group's empty node: no
// scale-up can ever help.
type noGroupFits struct {
	set     string
	reasons []string
}

func (e *noGroupFits) Error() string {
	return fmt.Sprintf("no node group can hold a pod of set %s (%s)", e.set, strings.Join(e.reasons, "; "))
}

// groupsExhausted is a pod set the node groups have no room for now.
type groupsExhausted struct {
	set     string
	reasons []string
}

func (e *groupsExhausted) Error() string {
	return fmt.Sprintf("the node groups cannot add enough nodes for pod set %s (%s)", e.set, strings.Join(e.reasons, "; "))
}

// plannedNode is a node a scale-up of g would add, for simulation. Its
// name cannot be a real node's ('/' is not allowed in one).
func plannedNode(g nodegroups.NodeGroup, seq int) *v1.Node {
	n := g.TemplateNode().DeepCopy()
	n.Name = fmt.Sprintf("planned/%s/%d", g.ID(), seq)
	n.Labels = maps.Clone(n.Labels)
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[v1.LabelHostname] = n.Name
	return n
}

// groupsOf are the provider's node groups a class may use: in the order
// the class names them, which is its order of preference (of two groups
// that need as many new nodes, the plan takes the first), else in the
// provider's order.
func (r *Reconciler) groupsOf(c Class) ([]nodegroups.NodeGroup, error) {
	if r.Provider == nil {
		return nil, errors.New("the provisioner has no node-group provider configured")
	}
	all := r.Provider.NodeGroups()
	if len(c.NodeGroups) == 0 {
		if len(all) == 0 {
			return nil, errors.New("the node-group provider has no node groups")
		}
		return all, nil
	}
	var out []nodegroups.NodeGroup
	for _, id := range c.NodeGroups {
		if i := slices.IndexFunc(all, func(g nodegroups.NodeGroup) bool { return g.ID() == id }); i >= 0 && !slices.Contains(out, all[i]) {
			out = append(out, all[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("class %s may use node groups %v, which the provider does not have", c.Name, c.NodeGroups)
	}
	return out, nil
}

// planScaleUp computes the nodes to add so that every pod of sets fits,
// by the same simulation as check-capacity: pods take the existing room
// first, then nodes built from the groups' templates. Sets are planned in
// order; each takes the group that needs the fewest new nodes for it,
// packing into nodes planned for earlier sets first. Group sizes are
// bounded by their maximum up front.
//
// Its simulations spend from b (nil: no bound).
func (r *Reconciler) planScaleUp(ctx context.Context, c simulator.Cluster, sets []simulator.PodSet, groups []nodegroups.NodeGroup, b *simulator.Budget) (scaleUpPlan, error) {
	seq := 0
	// Which groups could hold one pod of each set on an empty node.
	holds := make([][]nodegroups.NodeGroup, len(sets))
	for si, s := range sets {
		var reasons []string
		for _, g := range groups {
			seq++
			_, err := r.Simulator.PlaceWithin(ctx, simulator.Cluster{Nodes: []*v1.Node{plannedNode(g, seq)}},
				[]simulator.PodSet{{Name: s.Name, Pod: s.Pod, Count: 1}}, b)
			var u *simulator.Unschedulable
			switch {
			case err == nil:
				holds[si] = append(holds[si], g)
			case errors.As(err, &u):
				reasons = append(reasons, fmt.Sprintf("%s: %s", g.ID(), strings.TrimPrefix(u.Reason, "0/1 nodes are available: ")))
			default:
				return nil, err
			}
		}
		if len(holds[si]) == 0 {
			return nil, &noGroupFits{set: s.Name, reasons: reasons}
		}
	}

	plan := scaleUpPlan{}
	sizes := map[string]int{}
	var chosen []*v1.Node
	for si, s := range sets {
		var best nodegroups.NodeGroup
		var bestNew []*v1.Node
		var reasons []string
		for _, g := range holds[si] {
			if until, off := r.backoff.until(g.ID(), r.Clock.Now()); off {
				reasons = append(reasons, fmt.Sprintf("%s is backed off until %s after a failed scale-up", g.ID(), until.UTC().Format(time.RFC3339)))
				continue
			}
			size, ok := sizes[g.ID()]
			if !ok {
				var err error
				if size, err = g.TargetSize(ctx); err != nil {
					return nil, fmt.Errorf("node group %s: %w", g.ID(), err)
				}
				sizes[g.ID()] = size
			}
			// One pod per node is the most a set can need.
			room := min(g.MaxSize()-size-plan[g.ID()], s.Count)
			if room <= 0 {
				reasons = append(reasons, fmt.Sprintf("%s is at its maximum size of %d", g.ID(), g.MaxSize()))
				continue
			}
			cand := slices.Clone(chosen)
			for range room {
				seq++
				cand = append(cand, plannedNode(g, seq))
			}
			placement, err := r.Simulator.PlaceWithin(ctx, simulator.Cluster{Nodes: c.Nodes, Pods: c.Pods, NewNodes: cand}, sets[:si+1], b)
			var u *simulator.Unschedulable
			if errors.As(err, &u) {
				reasons = append(reasons, fmt.Sprintf("%s: %d more nodes (up to its maximum of %d) are not enough: %s", g.ID(), room, g.MaxSize(), u.Reason))
				continue
			}
			if err != nil {
				return nil, err
			}
			used := map[string]bool{}
			for _, nodes := range placement {
				for _, n := range nodes {
					used[n] = true
				}
			}
			var added []*v1.Node
			for _, n := range cand[len(chosen):] {
				if used[n.Name] {
					added = append(added, n)
				}
			}
			if best == nil || len(added) < len(bestNew) {
				best, bestNew = g, added
			}
		}
		if best == nil {
			return nil, &groupsExhausted{set: s.Name, reasons: reasons}
		}
		chosen = append(chosen, bestNew...)
		if len(bestNew) > 0 {
			plan[best.ID()] += len(bestNew)
		}
	}
	return plan, nil
}

// scaleUpPlanning is the scale-up planned for a request existing capacity
// cannot hold, made on the snapshot the pods did not fit.
type scaleUpPlanning struct {
	groups []nodegroups.NodeGroup
	// noGroups is why the class has no node group to use; then nothing
	// was planned.
	noGroups error
	plan     scaleUpPlan
	// err is planScaleUp's error.
	err error
}

// planScaleUpFor plans a scale-up for the request's pods on snapshot c, in
// the turn and within the budget b of the simulation that found no room.
func (r *Reconciler) planScaleUpFor(ctx context.Context, rq *request, c simulator.Cluster, b *simulator.Budget) *scaleUpPlanning {
	groups, err := r.groupsOf(rq.class)
	if err != nil {
		return &scaleUpPlanning{noGroups: err}
	}
	plan, err := r.planScaleUp(ctx, c, rq.sets, groups, b)
	return &scaleUpPlanning{groups: groups, plan: plan, err: err}
}

// startScaleUp starts the atomic scale-up planned for a request existing
// capacity cannot hold (existing says why). It runs without bookMu:
// creating nodes takes a while.
func (r *Reconciler) startScaleUp(ctx context.Context, rq *request, existing *simulator.Unschedulable, p *scaleUpPlanning) (reconcile.Result, error) {
	pr, class := rq.pr, rq.class
	if p.noGroups != nil {
		return r.notFound(ctx, rq, fmt.Sprintf("%s; cannot scale up: %v", existing.Error(), p.noGroups))
	}
	groups, plan, err := p.groups, p.plan, p.err
	var nf *noGroupFits
	var ex *groupsExhausted
	switch {
	case errors.As(err, &nf):
		return r.fail(ctx, rq, ReasonNoNodeGroupFits, nf.Error())
	case errors.As(err, &ex):
		return r.notFound(ctx, rq, ex.Error())
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("planning a scale-up: %w", err)
	case plan.total() == 0:
		// The pods fit the cluster plus nothing new: it changed since the
		// first simulation. Decide again.
		return reconcile.Result{RequeueAfter: readinessPoll}, nil
	}

	// Recorded before the first node exists: whatever happens next, the
	// attempt is found and completed or rolled back.
	attempt := rq.attemptID(rq.attempts() + 1)
	rq.recordScaleUp(attempt, plan.String(), r.Clock.Now())
	if err := r.writeStatus(ctx, rq); err != nil {
		return reconcile.Result{}, err
	}
	byID := map[string]nodegroups.NodeGroup{}
	for _, g := range groups {
		byID[g.ID()] = g
	}
	logger := klog.FromContext(ctx)
	for _, id := range slices.Sorted(maps.Keys(plan)) {
		names, err := byID[id].IncreaseSize(ctx, plan[id], attempt)
		// Cloud providers return the nodes that exist so far (often none):
		// a successful call counts what it was asked for.
		created := len(names)
		if err == nil {
			created = plan[id]
		}
		nodesCreated.WithLabelValues(id).Add(float64(created))
		if err != nil {
			why := fmt.Sprintf("adding %d nodes to node group %s failed: %v", plan[id], id, err)
			r.backOff(ctx, id, why)
			return r.attemptFailed(ctx, rq, why)
		}
		logger.V(2).Info("Scaling up", "nodeGroup", id, "nodes", len(names), "attempt", attempt)
	}
	msg := fmt.Sprintf("adding %d nodes (%s) for %d pods that existing capacity cannot hold; attempt %s, waiting up to %s for them to be Ready",
		plan.total(), plan, countPods(rq.sets), attempt, class.ProvisioningTimeout)
	r.Recorder.Event(pr, v1.EventTypeNormal, ReasonScalingUp, msg)
	rq.setCondition(provv1.ConditionProvisioned, metav1.ConditionFalse, ReasonScalingUp, msg)
	if err := r.writeStatus(ctx, rq); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: readinessPoll}, nil
}

// followScaleUp waits for the nodes of the request's attempt: all Ready →
// simulate and book them; past the provisioning timeout → roll back.
func (r *Reconciler) followScaleUp(ctx context.Context, rq *request) (reconcile.Result, error) {
	class := rq.class
	attempt := rq.checkedAttempt(ctx)
	recordedPlan, recordedStart := rq.scaleUpRecord()
	plan, err := parsePlan(recordedPlan)
	started, terr := time.Parse(time.RFC3339Nano, recordedStart)
	if err != nil || terr != nil {
		return r.attemptFailed(ctx, rq, "the scale-up attempt's record in status.provisioningClassDetails cannot be read")
	}
	if err := nodegroups.Refresh(ctx, r.Provider); err != nil {
		return reconcile.Result{}, err
	}
	nodes, err := r.Nodes.List(labels.SelectorFromSet(labels.Set{nodegroups.LabelAttempt: attempt}))
	if err != nil {
		return reconcile.Result{}, err
	}
	ready := 0
	readyIn := map[string]int{}
	for _, n := range nodes {
		if nodeReady(n) {
			ready++
			readyIn[n.Labels[nodegroups.LabelNodeGroup]]++
		}
	}
	want := plan.total()
	if ready >= want {
		for id := range plan {
			r.backoff.succeeded(id)
		}
		return r.simulateAndBook(ctx, rq)
	}
	waited := r.Clock.Since(started)
	if waited >= class.ProvisioningTimeout {
		why := fmt.Sprintf("%d of %d nodes of attempt %s were not Ready within the provisioning timeout (%s)", want-ready, want, attempt, class.ProvisioningTimeout)
		for _, id := range slices.Sorted(maps.Keys(plan)) {
			if readyIn[id] < plan[id] {
				r.backOff(ctx, id, why)
			}
		}
		return r.attemptFailed(ctx, rq, why)
	}
	return reconcile.Result{RequeueAfter: min(readinessPoll, class.ProvisioningTimeout-waited)}, nil
}

// backOff keeps node group id out of every request's plans for a while
// (groupBackoff) after a scale-up of it failed for why.
func (r *Reconciler) backOff(ctx context.Context, id, why string) {
	initial, maxBackoff := r.NodeGroupBackoff, r.MaxNodeGroupBackoff
	if initial <= 0 {
		initial = DefaultNodeGroupBackoff
	}
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxNodeGroupBackoff
	}
	until := r.backoff.failed(id, r.Clock.Now(), initial, max(initial, maxBackoff))
	nodeGroupBackoffs.WithLabelValues(id).Inc()
	klog.FromContext(ctx).Info("Backing off node group after a failed scale-up", "nodeGroup", id, "until", until, "reason", why)
}

// rollBackAttempt deletes every node of the request's own attempt through
// the provider, but those that run pods, and forgets the attempt (in the
// request's status; written by the caller's next status update). Without
// an attempt of its own it deletes nothing.
func (r *Reconciler) rollBackAttempt(ctx context.Context, rq *request, why string) error {
	attempt := rq.checkedAttempt(ctx)
	if attempt == "" {
		rq.forgetAttempt()
		return nil
	}
	deleted, err := r.rollBack(ctx, attempt, rq.pr.UID)
	if err != nil {
		return fmt.Errorf("rolling back scale-up attempt %s: %w", attempt, err)
	}
	if deleted > 0 {
		r.Recorder.Eventf(rq.pr, v1.EventTypeWarning, ReasonScaleUpRolledBack, "Deleted the %d nodes of attempt %s: %s", deleted, attempt, why)
	}
	rq.forgetAttempt()
	return nil
}

// rollBack deletes the nodes of an attempt of the request of UID owner in
// every node group, but those in use (keepNode).
func (r *Reconciler) rollBack(ctx context.Context, attempt string, owner types.UID) (int, error) {
	if r.Provider == nil {
		return 0, nil
	}
	total := 0
	var errs []error
	keep := r.keepNode(owner)
	for _, g := range r.Provider.NodeGroups() {
		n, err := nodegroups.RollBack(ctx, g, attempt, keep)
		nodesRolledBack.WithLabelValues(g.ID()).Add(float64(n))
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("node group %s: %w", g.ID(), err))
		}
	}
	return total, errors.Join(errs...)
}

// keepNode returns whether a node about to be deleted for the request of
// UID owner is in use, looked up through the API: it runs a pod (runsPods),
// or holds a booking not the request's own, another tenant's maybe. The
// Reservations are listed once, at the first node asked about.
func (r *Reconciler) keepNode(owner types.UID) func(context.Context, *v1.Node) (bool, error) {
	var booked map[string]bool
	return func(ctx context.Context, n *v1.Node) (bool, error) {
		if busy, err := r.runsPods(ctx, n); err != nil || busy {
			return busy, err
		}
		if booked == nil {
			var err error
			if booked, err = r.BookedNodes(ctx, true, owner); err != nil {
				return false, err
			}
		}
		if booked[n.Name] {
			klog.FromContext(ctx).Info("Keeping a node of the request's scale-up: it holds a booking", "node", klog.KObj(n), "attempt", n.Labels[nodegroups.LabelAttempt])
			return true, nil
		}
		return false, nil
	}
}

// runsPods reports whether a node runs a pod that keeps it (see
// HoldsNode), looked up through the API just before the node would be
// deleted; without an API reader, in the pod cache. Such a node is never
// rolled back: the pod may be another tenant's.
func (r *Reconciler) runsPods(ctx context.Context, n *v1.Node) (bool, error) {
	if r.APIReader == nil {
		if r.Pods == nil {
			return true, nil
		}
		pods, err := r.Pods.List(labels.Everything())
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(pods, func(p *v1.Pod) bool { return p.Spec.NodeName == n.Name && HoldsNode(p) }), nil
	}
	var pods v1.PodList
	if err := r.APIReader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", n.Name)}); err != nil {
		return false, fmt.Errorf("listing the pods of node %s: %w", n.Name, err)
	}
	if slices.ContainsFunc(pods.Items, func(p v1.Pod) bool { return HoldsNode(&p) }) {
		klog.FromContext(ctx).Info("Keeping a node of a rolled-back attempt: it runs pods", "node", klog.KObj(n), "attempt", n.Labels[nodegroups.LabelAttempt])
		return true, nil
	}
	return false, nil
}

// removeUnusedNodes deletes the nodes any attempt of a request created
// (labelled "<its UID>-<n>") that nothing uses (no pod, looked up through
// the API just before; no other booking): a cancelled request leaves
// nothing behind.
func (r *Reconciler) removeUnusedNodes(ctx context.Context, rq *request) error {
	if r.Provider == nil {
		return nil
	}
	pr := rq.pr
	nodes, err := r.Nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	used, err := r.NodesInUse(ctx, pr.UID)
	if err != nil {
		return err
	}
	prefix := string(pr.UID) + "-"
	byGroup := map[nodegroups.NodeGroup][]string{}
	keep := r.keepNode(pr.UID)
	for _, n := range nodes {
		if !strings.HasPrefix(n.Labels[nodegroups.LabelAttempt], prefix) || used[n.Name] {
			continue
		}
		// The cache may lag: a pod bound or a booking placed meanwhile
		// keeps the node.
		if busy, err := keep(ctx, n); err != nil || busy {
			if err != nil {
				return err
			}
			continue
		}
		if g, ok := r.Provider.NodeGroupForNode(n); ok {
			byGroup[g] = append(byGroup[g], n.Name)
		}
	}
	var errs []error
	deleted := 0
	for g, names := range byGroup {
		sort.Strings(names)
		if err := g.DeleteNodes(ctx, names); err != nil {
			errs = append(errs, fmt.Errorf("node group %s: %w", g.ID(), err))
			continue
		}
		deleted += len(names)
		nodesRolledBack.WithLabelValues(g.ID()).Add(float64(len(names)))
	}
	if deleted > 0 {
		r.Recorder.Eventf(pr, v1.EventTypeNormal, ReasonNodesRemoved, "Deleted %d unused nodes created for the request", deleted)
	}
	return errors.Join(errs...)
}

// nodeReady reports whether a node is Ready and rid of the taints a new
// node starts with (lifted by the node lifecycle controller and the cloud
// controller once it is up): only then do the pods fit there.
func nodeReady(n *v1.Node) bool {
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case v1.TaintNodeNotReady, v1.TaintNodeUnreachable, nodegroups.TaintUninitialized:
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
