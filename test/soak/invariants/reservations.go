package invariants

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation"
)

// Invariants of the Reservation family.
const (
	// InvariantExpired: a Pending or Available Reservation outlived its
	// ttl or expires by more than the lag.
	InvariantExpired = "Expired"
	// InvariantNodeGone: an Available Reservation outlived its node.
	InvariantNodeGone = "NodeGone"
	// InvariantNotSucceeded: an allocate-once Reservation with an owner
	// placed in it stayed Available.
	InvariantNotSucceeded = "NotSucceededWhenConsumed"
	// InvariantOutlivesRequest: a booking outlived its ProvisioningRequest
	// (gone, being deleted, or ended).
	InvariantOutlivesRequest = "OutlivesRequest"
	// InvariantTerminalKept: a Succeeded or Failed Reservation outlived
	// terminalReservationTTL.
	InvariantTerminalKept = "TerminalNotDeleted"
	// InvariantOverbooked: a node's capacity is held twice.
	InvariantOverbooked = "NodeOverbooked"
	// InvariantPodInTwo: a pod is allocated to two Reservations.
	InvariantPodInTwo = "PodInTwoReservations"
	// InvariantOverAllocated: a Reservation holds more owners or more
	// allocation than it allows.
	InvariantOverAllocated = "OverAllocated"
)

// checkReservations judges every Reservation's lifetime and allocation,
// and every node's capacity.
func (c *Checker) checkReservations(ix *index) []Violation {
	var out []Violation
	// allocs: for each pod, the Reservations it is allocated to.
	allocs := map[types.UID][]*schedv1alpha1.Reservation{}
	for _, r := range ix.s.Reservations {
		placed := ix.placed(r)
		out = append(out, c.reservationLifetime(ix, r, placed)...)
		out = append(out, c.reservationAllocation(ix, r, placed)...)
		seen := map[types.UID]bool{}
		for _, o := range r.Status.CurrentOwners {
			if o.UID != "" && !seen[o.UID] {
				seen[o.UID] = true
				allocs[o.UID] = append(allocs[o.UID], r)
			}
		}
		for _, p := range placed {
			if !seen[p.UID] {
				seen[p.UID] = true
				allocs[p.UID] = append(allocs[p.UID], r)
			}
		}
	}
	uids := make([]types.UID, 0, len(allocs))
	for uid := range allocs {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, uid := range uids {
		c.checks[FamilyReservation]++
		rs := allocs[uid]
		if len(rs) < 2 {
			continue
		}
		since, ok := c.persisted("pod-in-two/"+string(uid), ix.now)
		if !ok {
			continue
		}
		pod := ObjectRef{Kind: "Pod", UID: uid}
		if p := ix.pods[uid]; p != nil {
			pod = podRef(p)
		} else {
			for _, o := range rs[0].Status.CurrentOwners {
				if o.UID == uid {
					pod = ObjectRef{Kind: "Pod", Namespace: o.Namespace, Name: o.Name, UID: uid}
				}
			}
		}
		objs := []ObjectRef{pod}
		for _, r := range rs {
			objs = append(objs, reservationRef(r))
		}
		out = append(out, c.report(string(uid), Violation{
			Family: FamilyReservation, Invariant: InvariantPodInTwo, Objects: objs, Since: since, Seen: ix.now,
			Message: fmt.Sprintf("%s is allocated to %d Reservations at once (recorded in status.currentOwners or placed by its allocation annotation): %s; first seen at %s, still at %s",
				pod, len(rs), refs(objs[1:], 10), stamp(since), stamp(ix.now)),
		})...)
	}
	out = append(out, c.nodeCapacity(ix)...)
	return out
}

// reservationLifetime judges what must end r: its expiry, its node's
// deletion, its consumption (allocate-once), its request's end, and for a
// terminal one its garbage collection.
func (c *Checker) reservationLifetime(ix *index, r *schedv1alpha1.Reservation, placed []*v1.Pod) []Violation {
	var out []Violation
	now, lag := ix.now, c.cfg.reservationLag()
	key := string(r.UID)
	ph := phase(r)
	if exp, ok := reservation.Expiry(r); ok && live(r) {
		c.checks[FamilyReservation]++
		if limit := exp.Add(lag); now.After(limit) {
			how := "expires " + stamp(exp)
			if r.Spec.Expires == nil {
				how = fmt.Sprintf("ttl %s from its creation at %s", r.Spec.TTL.Duration, stamp(r.CreationTimestamp.Time))
			}
			out = append(out, c.report(key, Violation{
				Family: FamilyReservation, Invariant: InvariantExpired, Objects: []ObjectRef{reservationRef(r)},
				Since: exp, Limit: limit, Seen: now,
				Message: fmt.Sprintf("%s is still %s at %s, %s after it expired at %s (%s); the status controller had until %s (resync %s + %s) to fail it: %s past the limit",
					reservationRef(r), ph, stamp(now), span(now.Sub(exp)), stamp(exp), how, stamp(limit), c.cfg.StatusResync, c.cfg.Grace, span(now.Sub(limit))),
			})...)
		}
	}
	if ph == schedv1alpha1.ReservationAvailable && r.Status.NodeName != "" {
		c.checks[FamilyReservation]++
		if _, ok := ix.nodes[r.Status.NodeName]; !ok {
			since := c.since("node-gone/"+key+"/"+r.Status.NodeName, now)
			if limit := since.Add(lag); now.After(limit) {
				node := ObjectRef{Kind: "Node", Name: r.Status.NodeName}
				out = append(out, c.report(key, Violation{
					Family: FamilyReservation, Invariant: InvariantNodeGone, Objects: []ObjectRef{reservationRef(r), node},
					Since: since, Limit: limit, Seen: now,
					Message: fmt.Sprintf("%s is still Available on %s at %s, though the node has been gone since %s (first seen gone); it should have been Failed (NodeDeleted) by %s: %s past the limit",
						reservationRef(r), node, stamp(now), stamp(since), stamp(limit), span(now.Sub(limit))),
				})...)
			}
		}
	}
	if ph == schedv1alpha1.ReservationAvailable && reservation.AllocateOnce(r) {
		c.checks[FamilyReservation]++
		owners := ownersOf(r, placed)
		if len(owners) > 0 {
			since := c.since("consumed/"+key, now)
			if limit := since.Add(lag); now.After(limit) {
				objs := append([]ObjectRef{reservationRef(r)}, owners...)
				out = append(out, c.report(key, Violation{
					Family: FamilyReservation, Invariant: InvariantNotSucceeded, Objects: objs,
					Since: since, Limit: limit, Seen: now,
					Message: fmt.Sprintf("%s is allocate-once and %s was placed in it (first seen at %s), yet it is still Available at %s, holding capacity for another owner; it should have been Succeeded by %s: %s past the limit",
						reservationRef(r), refs(owners, 10), stamp(since), stamp(now), stamp(limit), span(now.Sub(limit))),
				})...)
			}
		}
	}
	if uid, ns, name, ok := bookingOf(r); ok {
		c.checks[FamilyReservation]++
		if since, why, pr, over := c.requestEnd(ix, uid); over {
			if limit := since.Add(lag); now.After(limit) {
				req := ObjectRef{Kind: "ProvisioningRequest", Namespace: ns, Name: name, UID: uid}
				if pr != nil {
					req = requestRef(pr)
				} else if other := ix.byKey[ns+"/"+name]; other != nil {
					why += fmt.Sprintf("; a request of the same name has uid %s, whose pods may consume this booking", other.UID)
				}
				out = append(out, c.report(key, Violation{
					Family: FamilyReservation, Invariant: InvariantOutlivesRequest, Objects: []ObjectRef{reservationRef(r), req},
					Since: since, Limit: limit, Seen: now,
					Message: fmt.Sprintf("%s (%s) still exists at %s, booked for %s, which %s; the provisioner should have released it by %s: %s past the limit",
						reservationRef(r), ph, stamp(now), req, why, stamp(limit), span(now.Sub(limit))),
				})...)
			}
		}
	}
	if !live(r) && c.cfg.TerminalReservationTTL >= 0 {
		c.checks[FamilyReservation]++
		since := terminalSince(r)
		if limit := since.Add(c.cfg.TerminalReservationTTL + lag); now.After(limit) {
			out = append(out, c.report(key, Violation{
				Family: FamilyReservation, Invariant: InvariantTerminalKept, Objects: []ObjectRef{reservationRef(r)},
				Since: since, Limit: limit, Seen: now,
				Message: fmt.Sprintf("%s has been %s since %s and still exists at %s; terminal reservations are deleted after %s, so it should have been gone by %s: %s past the limit",
					reservationRef(r), ph, stamp(since), stamp(now), c.cfg.TerminalReservationTTL, stamp(limit), span(now.Sub(limit))),
			})...)
		}
	}
	return out
}

// ownersOf are the owners placed in r: those its status records and the
// pods placed in it, each once.
func ownersOf(r *schedv1alpha1.Reservation, placed []*v1.Pod) []ObjectRef {
	var out []ObjectRef
	seen := map[types.UID]bool{}
	for _, o := range r.Status.CurrentOwners {
		if !seen[o.UID] || o.UID == "" {
			seen[o.UID] = true
			out = append(out, ObjectRef{Kind: "Pod", Namespace: o.Namespace, Name: o.Name, UID: o.UID})
		}
	}
	for _, p := range placed {
		if !seen[p.UID] {
			seen[p.UID] = true
			out = append(out, podRef(p))
		}
	}
	return out
}

// reservationAllocation judges what r allows: one owner when allocate-once,
// and status.allocated within what it holds.
func (c *Checker) reservationAllocation(ix *index, r *schedv1alpha1.Reservation, placed []*v1.Pod) []Violation {
	c.checks[FamilyReservation]++
	var problems []string
	owners := ownersOf(r, placed)
	if reservation.AllocateOnce(r) && len(owners) > 1 {
		problems = append(problems, fmt.Sprintf("it is allocate-once but %d owners were placed in it: %s", len(owners), refs(owners, 10)))
	}
	var over []string
	for _, name := range sortedNames(r.Status.Allocated) {
		q := r.Status.Allocated[name]
		h, ok := r.Spec.Template.Requests[name]
		switch {
		case !ok && !q.IsZero():
			over = append(over, fmt.Sprintf("%s %s, which it does not hold", name, q.String()))
		case ok && q.Cmp(h) > 0:
			over = append(over, fmt.Sprintf("%s %s of the %s it holds", name, q.String(), h.String()))
		}
	}
	if len(over) > 0 {
		problems = append(problems, "status.allocated records "+strings.Join(over, ", "))
	}
	if len(problems) == 0 {
		return nil
	}
	since, ok := c.persisted("over-allocated/"+string(r.UID), ix.now)
	if !ok {
		return nil
	}
	return c.report(string(r.UID), Violation{
		Family: FamilyReservation, Invariant: InvariantOverAllocated, Objects: append([]ObjectRef{reservationRef(r)}, owners...),
		Since: since, Seen: ix.now,
		Message: fmt.Sprintf("%s (%s) holds more than it allows: %s; first seen at %s, still at %s",
			reservationRef(r), phase(r), strings.Join(problems, "; "), stamp(since), stamp(ix.now)),
	})
}

// nodeCapacity judges each node: the requests of the pods bound there that
// have not finished plus what the live Reservations there hold (less their
// placed pods, which are counted as pods) stay within its allocatable, for
// each resource they request.
func (c *Checker) nodeCapacity(ix *index) []Violation {
	var out []Violation
	holders := map[string][]*schedv1alpha1.Reservation{}
	holds := map[types.UID]v1.ResourceList{}
	for _, r := range ix.s.Reservations {
		if h := holding(r, held(ix.placed(r))); len(h) > 0 {
			holders[r.Status.NodeName] = append(holders[r.Status.NodeName], r)
			holds[r.UID] = h
		}
	}
	for _, n := range ix.s.Nodes {
		used := v1.ResourceList{}
		var pods []*v1.Pod
		for _, p := range ix.podsOnNode[n.Name] {
			if !terminalPod(p) {
				pods = append(pods, p)
				addTo(used, podRequests(p))
			}
		}
		for _, r := range holders[n.Name] {
			addTo(used, holds[r.UID])
		}
		for _, name := range sortedNames(used) {
			q := used[name]
			if q.IsZero() {
				continue
			}
			c.checks[FamilyReservation]++
			alloc := n.Status.Allocatable[name]
			if q.Cmp(alloc) <= 0 {
				continue
			}
			key := n.Name + "/" + string(name)
			since, ok := c.persisted("overbooked/"+key, ix.now)
			if !ok {
				continue
			}
			objs := []ObjectRef{nodeRef(n)}
			var parts []string
			for _, p := range pods {
				if r, ok := podRequests(p)[name]; ok && !r.IsZero() {
					objs = append(objs, podRef(p))
					parts = append(parts, fmt.Sprintf("%s requests %s", podRef(p), r.String()))
				}
			}
			for _, r := range holders[n.Name] {
				if h, ok := holds[r.UID][name]; ok && !h.IsZero() {
					objs = append(objs, reservationRef(r))
					parts = append(parts, fmt.Sprintf("%s holds %s", reservationRef(r), h.String()))
				}
			}
			excess := q.DeepCopy()
			excess.Sub(alloc)
			if len(parts) > 12 {
				parts = append(parts[:12], fmt.Sprintf("and %d more", len(parts)-12))
			}
			out = append(out, c.report(key, Violation{
				Family: FamilyReservation, Invariant: InvariantOverbooked, Objects: objs, Since: since, Seen: ix.now,
				Message: fmt.Sprintf("%s has %s %s booked against %s allocatable (%s over): %s; first seen at %s, still at %s",
					nodeRef(n), name, q.String(), allocString(alloc), excess.String(), strings.Join(parts, "; "), stamp(since), stamp(ix.now)),
			})...)
		}
	}
	return out
}

func allocString(q resource.Quantity) string {
	if q.IsZero() {
		return "0"
	}
	return q.String()
}

func sortedNames(l v1.ResourceList) []v1.ResourceName {
	names := make([]v1.ResourceName, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
