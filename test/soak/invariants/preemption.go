package invariants

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// Invariants of the Preemption family.
const (
	// InvariantPreemptorStuck: a pending pod kept its nomination to a node
	// longer than a preemption takes to succeed or fail.
	InvariantPreemptorStuck = "PreemptorStuck"
	// InvariantNominationOfGonePod: the scheduler's nominator held a pod
	// (or a Reservation) that is gone, or a Reservation that no longer
	// waits, for longer than Grace.
	InvariantNominationOfGonePod = "NominationOfGonePod"
	// InvariantCachedPodGone: the scheduler's cache held a pod (or a
	// Reservation's pod) whose object is gone, or a Reservation's pod whose
	// Reservation ended, for longer than Grace.
	InvariantCachedPodGone = "CachedPodGone"
)

// checkPreemption judges what a preemption leaves behind: preemptors
// nominated for good, from the API's pods, and, when the snapshot holds
// the scheduler's views, nominations and cached pods the API no longer has.
func (c *Checker) checkPreemption(ix *index) []Violation {
	var out []Violation
	if c.cfg.PreemptionLimit > 0 {
		for _, p := range ix.s.Pods {
			out = append(out, c.preemptorStuck(ix, p)...)
		}
	}
	if ix.s.SchedulerNodes == nil {
		return out
	}
	reservations := make(map[types.UID]*schedv1alpha1.Reservation, len(ix.s.Reservations))
	for _, r := range ix.s.Reservations {
		reservations[r.UID] = r
	}
	for i := range ix.s.SchedulerNodes {
		view := &ix.s.SchedulerNodes[i]
		for _, np := range view.Nominated {
			out = append(out, c.schedulerHolds(ix, reservations, view.Name, np, true)...)
		}
		for _, np := range view.Pods {
			out = append(out, c.schedulerHolds(ix, reservations, view.Name, np, false)...)
		}
	}
	return out
}

// preemptorStuck judges a pod nominated to a node, unbound, not being
// deleted and not gated (a gated pod is not scheduled, so nothing clears
// its nomination): AsyncPreemption either succeeds, and re-activates the
// preemptor once its victims have left the cache (executor.go start,
// awaitLeaving), whereupon it is bound or its next attempt nominates it
// elsewhere or clears the nomination (PostFilter), or it fails, and clears
// the nomination before the preemptor retries after its backoff (finish,
// clearNomination). Either way the nomination to that node ends within
// PreemptionLimit of when the checker first saw it, or of when the node
// last had a terminating pod of lower priority: a victim with a grace
// period stays until its kubelet has stopped it, and the preemptor waits
// for it, as upstream's does (PodEligibleToPreemptOthers), however long
// that takes.
func (c *Checker) preemptorStuck(ix *index, p *v1.Pod) []Violation {
	node := p.Status.NominatedNodeName
	if node == "" || p.Spec.NodeName != "" || p.DeletionTimestamp != nil || len(p.Spec.SchedulingGates) > 0 || terminalPod(p) {
		return nil
	}
	c.checks[FamilyPreemption]++
	key := "nominated/" + string(p.UID) + "/" + node
	if terminatingBelow(ix, p, node) {
		return nil // the clock, untouched, starts again once they are gone
	}
	now := ix.now
	since := c.since(key, now)
	limit := since.Add(c.cfg.PreemptionLimit)
	if !now.After(limit) {
		return nil
	}
	n := ObjectRef{Kind: "Node", Name: node}
	if nd := ix.nodes[node]; nd != nil {
		n = nodeRef(nd)
	}
	return c.report(string(p.UID)+"/"+node, Violation{
		Family: FamilyPreemption, Invariant: InvariantPreemptorStuck, Objects: []ObjectRef{podRef(p), n},
		Since: since, Limit: limit, Seen: now,
		Message: fmt.Sprintf("%s has been nominated to %s since %s (as first seen) and at %s is still neither bound nor rid of the nomination; a preemption ends, bound or cleared, within %s (preemption timeout, longest backoff, victims leaving the cache, plus grace), so by %s: %s past the limit",
			podRef(p), n, stamp(since), stamp(now), c.cfg.PreemptionLimit, stamp(limit), span(now.Sub(limit))),
	})
}

// terminatingBelow reports whether node has a pod being deleted whose
// priority is below p's: one p may be waiting for, as its victim.
func terminatingBelow(ix *index, p *v1.Pod, node string) bool {
	prio := ptr.Deref(p.Spec.Priority, 0)
	for _, q := range ix.podsOnNode[node] {
		if q.DeletionTimestamp != nil && q.UID != p.UID && ptr.Deref(q.Spec.Priority, 0) < prio {
			return true
		}
	}
	return false
}

// schedulerHolds judges one pod of a scheduler's node view: nominated
// there (nominated) or held in its cache there. A real pod must still
// exist in the API. A pod without a namespace is a Reservation's reserve
// pod (scheduler/reservepod Is: no real pod lacks one), with the
// Reservation's name and UID: the Reservation must still exist and, for a
// nomination, still be Pending (the store drops the nomination of a
// Reservation that is not, reconcile), for a cached one still be Pending
// (the scheduler assumes its pod while it binds) or Available (the store
// caches a live one, mirror.go reconcile). The scheduler sees a deletion
// through its informers, and the view may be read a moment before or
// after the snapshot's lists: Grace allows for both.
func (c *Checker) schedulerHolds(ix *index, reservations map[types.UID]*schedv1alpha1.Reservation, node string, np frameworkext.NodeViewPod, nominated bool) []Violation {
	c.checks[FamilyPreemption]++
	invariant, where, key := InvariantCachedPodGone, "in its cache on", "cached-gone/"
	if nominated {
		invariant, where, key = InvariantNominationOfGonePod, "nominated to", "nominee-gone/"
	}
	var obj ObjectRef
	var why string
	if np.Namespace != "" {
		if ix.pods[np.UID] != nil {
			return nil
		}
		obj = ObjectRef{Kind: "Pod", Namespace: np.Namespace, Name: np.Name, UID: np.UID}
		why = "the pod is gone from the API"
	} else {
		obj = ObjectRef{Kind: "Reservation", Name: np.Name, UID: np.UID}
		r := reservations[np.UID]
		switch {
		case r == nil:
			why = "the Reservation is gone from the API"
		case nominated && phase(r) != schedv1alpha1.ReservationPending:
			why = fmt.Sprintf("the Reservation is %s, no longer Pending", phase(r))
		case !nominated && !live(r):
			why = fmt.Sprintf("the Reservation is %s", phase(r))
		default:
			return nil
		}
	}
	now := ix.now
	since := c.since(key+string(np.UID)+"/"+node, now)
	limit := since.Add(c.cfg.Grace)
	if !now.After(limit) {
		return nil
	}
	n := ObjectRef{Kind: "Node", Name: node}
	return c.report(string(np.UID)+"/"+node, Violation{
		Family: FamilyPreemption, Invariant: invariant, Objects: []ObjectRef{obj, n},
		Since: since, Limit: limit, Seen: now,
		Message: fmt.Sprintf("the scheduler still holds %s %s %s at %s: %s, as first seen at %s; it should have let go of it by %s (grace %s): %s past the limit",
			obj, where, n, stamp(now), why, stamp(since), stamp(limit), c.cfg.Grace, span(now.Sub(limit))),
	})
}
