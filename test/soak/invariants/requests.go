package invariants

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation"
)

// Invariants of the ProvisioningRequest family.
const (
	// InvariantValidity: a request was neither Provisioned nor ended
	// within its validity and grace.
	InvariantValidity = "NotDecidedInValidity"
	// InvariantBookedTwice: a request's live bookings hold room for more
	// pods than it asks for.
	InvariantBookedTwice = "BookedTwice"
	// InvariantAttemptsOverlap: a Reservation of a failed attempt outlived
	// it into the next.
	InvariantAttemptsOverlap = "AttemptsOverlap"
	// InvariantBookedAfterEnd: a Reservation was created for a request
	// after it ended.
	InvariantBookedAfterEnd = "BookedAfterEnd"
	// InvariantRevived: a request was Provisioned again, or stopped being
	// ended, after it ended.
	InvariantRevived = "RevivedAfterEnd"
	// InvariantStillProvisioned: a Provisioned request did not end once
	// its booking did.
	InvariantStillProvisioned = "ProvisionedPastBooking"
)

// requestMemory is what the checker keeps about one request.
type requestMemory struct {
	// attempts is the request's count of failed attempts as last seen;
	// current are its Reservations seen since that count.
	attempts int
	current  map[types.UID]bool
	// stale are Reservations seen before the count last rose: the
	// attempt each belonged to and when the count rose.
	stale map[types.UID]staleBooking
	// ended is the terminal condition once seen True.
	ended *metav1.Condition
	// bookingEnd is the latest expiry of its Reservations seen.
	bookingEnd time.Time
}

type staleBooking struct {
	attempt int
	since   time.Time
}

// checkRequests judges every ProvisioningRequest of the classes checked.
func (c *Checker) checkRequests(ix *index) []Violation {
	var out []Violation
	present := map[types.UID]bool{}
	for _, pr := range ix.s.ProvisioningRequests {
		if len(c.cfg.Classes) > 0 && !slices.Contains(c.cfg.Classes, pr.Spec.ProvisioningClassName) {
			continue
		}
		present[pr.UID] = true
		mem := c.requests[pr.UID]
		if mem == nil {
			mem = &requestMemory{attempts: attempts(pr), current: map[types.UID]bool{}, stale: map[types.UID]staleBooking{}}
			c.requests[pr.UID] = mem
		}
		bookings := slices.Clone(ix.bookings[pr.UID])
		sort.Slice(bookings, func(i, j int) bool { return bookings[i].Name < bookings[j].Name })
		for _, r := range bookings {
			if exp, ok := reservation.Expiry(r); ok && exp.After(mem.bookingEnd) {
				mem.bookingEnd = exp
			}
		}
		out = append(out, c.requestValidity(ix, pr)...)
		out = append(out, c.requestServedOnce(ix, pr, bookings, mem)...)
		out = append(out, c.requestAttempts(ix, pr, bookings, mem)...)
		out = append(out, c.requestBookingEnd(ix, pr, mem)...)
	}
	for uid := range c.requests {
		if !present[uid] {
			delete(c.requests, uid)
		}
	}
	return out
}

// validity is how long after its creation pr must be decided, and how it
// was set: its ValidUntilSeconds parameter (one that is not a positive
// number fails the request at once, provisioning parameters in class.go),
// else its class's.
func (c *Checker) validity(pr *provv1.ProvisioningRequest) (time.Duration, string) {
	if v, ok := pr.Spec.Parameters[provv1.ParameterValidUntilSeconds]; ok {
		n, err := strconv.ParseInt(string(v), 10, 32)
		if err != nil || n < 1 {
			return 0, fmt.Sprintf("%s %q, which fails it at once", provv1.ParameterValidUntilSeconds, string(v))
		}
		d := time.Duration(n) * time.Second
		return d, fmt.Sprintf("%s %d", provv1.ParameterValidUntilSeconds, n)
	}
	if d, ok := c.cfg.ClassValidUntil[pr.Spec.ProvisioningClassName]; ok {
		return d, "its class's validity " + d.String()
	}
	return c.cfg.DefaultValidUntil, "the default validity " + c.cfg.DefaultValidUntil.String()
}

// requestValidity judges that pr was Provisioned or ended (a terminal
// condition True, or deleted) within its validity plus the grace.
func (c *Checker) requestValidity(ix *index, pr *provv1.ProvisioningRequest) []Violation {
	c.checks[FamilyProvisioning]++
	now := ix.now
	valid, how := c.validity(pr)
	deadline := pr.CreationTimestamp.Add(valid)
	limit := deadline.Add(c.cfg.ValidityGrace + c.cfg.ClassGrace[pr.Spec.ProvisioningClassName])
	var reached time.Time
	what := ""
	for _, typ := range append([]string{provv1.ConditionProvisioned}, terminalConditions...) {
		if cond := meta.FindStatusCondition(pr.Status.Conditions, typ); cond != nil && cond.Status == metav1.ConditionTrue &&
			(reached.IsZero() || cond.LastTransitionTime.Time.Before(reached)) {
			reached, what = cond.LastTransitionTime.Time, typ+"=True"
		}
	}
	if d := pr.DeletionTimestamp; d != nil && (reached.IsZero() || d.Time.Before(reached)) {
		reached, what = d.Time, "deleted"
	}
	head := fmt.Sprintf("%s (class %s), created at %s with %s, had until %s to be Provisioned or end, and %s of grace (until %s)",
		requestRef(pr), pr.Spec.ProvisioningClassName, stamp(pr.CreationTimestamp.Time), how, stamp(deadline),
		span(limit.Sub(deadline)), stamp(limit))
	switch {
	case reached.IsZero() && now.After(limit):
		return c.report(string(pr.UID), Violation{
			Family: FamilyProvisioning, Invariant: InvariantValidity, Objects: []ObjectRef{requestRef(pr)},
			Since: deadline, Limit: limit, Seen: now,
			Message: fmt.Sprintf("%s; it is neither at %s (%s): %s past the limit", head, stamp(now), conditionSummary(pr), span(now.Sub(limit))),
		})
	case !reached.IsZero() && reached.After(limit):
		return c.report(string(pr.UID), Violation{
			Family: FamilyProvisioning, Invariant: InvariantValidity, Objects: []ObjectRef{requestRef(pr)},
			Since: deadline, Limit: limit, Seen: now,
			Message: fmt.Sprintf("%s; it became %s only at %s (seen at %s): %s past the limit", head, what, stamp(reached), stamp(now), span(reached.Sub(limit))),
		})
	}
	return nil
}

// conditionSummary lists pr's conditions for a message.
func conditionSummary(pr *provv1.ProvisioningRequest) string {
	if len(pr.Status.Conditions) == 0 {
		return "no conditions"
	}
	s := ""
	for i, cond := range pr.Status.Conditions {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s=%s %s", cond.Type, cond.Status, cond.Reason)
	}
	return s
}

// requestServedOnce judges that pr is served once: its live bookings hold
// no more pods than it asks for, none was created after it ended, and it
// was neither Provisioned again nor made live again after it ended.
func (c *Checker) requestServedOnce(ix *index, pr *provv1.ProvisioningRequest, bookings []*schedv1alpha1.Reservation, mem *requestMemory) []Violation {
	var out []Violation
	now := ix.now
	key := string(pr.UID)

	c.checks[FamilyProvisioning]++
	booked, want := 0, requestedPods(pr)
	var liveRefs []ObjectRef
	for _, r := range bookings {
		if live(r) {
			booked += bookedPods(r)
			liveRefs = append(liveRefs, reservationRef(r))
		}
	}
	if int64(booked) > want {
		if since, ok := c.persisted("booked-twice/"+key, now); ok {
			out = append(out, c.report(key, Violation{
				Family: FamilyProvisioning, Invariant: InvariantBookedTwice, Objects: append([]ObjectRef{requestRef(pr)}, liveRefs...),
				Since: since, Seen: now,
				Message: fmt.Sprintf("%s asks for %s but its %s book %d: %s; first seen at %s, still at %s",
					requestRef(pr), count(int(want), "pod"), count(len(liveRefs), "live Reservation"), booked, refs(liveRefs, 10), stamp(since), stamp(now)),
			})...)
		}
	}

	e := ended(pr)
	if e != nil {
		end := e.LastTransitionTime.Time
		for _, r := range bookings {
			c.checks[FamilyProvisioning]++
			if r.CreationTimestamp.Time.After(end) {
				out = append(out, c.report(string(r.UID), Violation{
					Family: FamilyProvisioning, Invariant: InvariantBookedAfterEnd, Objects: []ObjectRef{requestRef(pr), reservationRef(r)},
					Since: end, Seen: now,
					Message: fmt.Sprintf("%s was created at %s for %s, which had ended at %s (%s=True, reason %s); seen at %s",
						reservationRef(r), stamp(r.CreationTimestamp.Time), requestRef(pr), stamp(end), e.Type, e.Reason, stamp(now)),
				})...)
			}
		}
		c.checks[FamilyProvisioning]++
		if p := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionProvisioned); p != nil && p.Status == metav1.ConditionTrue && p.LastTransitionTime.Time.After(end) {
			out = append(out, c.report(key, Violation{
				Family: FamilyProvisioning, Invariant: InvariantRevived, Objects: []ObjectRef{requestRef(pr)},
				Since: end, Seen: now,
				Message: fmt.Sprintf("%s became Provisioned=True at %s (reason %s), after it had ended at %s (%s=True, reason %s); seen at %s",
					requestRef(pr), stamp(p.LastTransitionTime.Time), p.Reason, stamp(end), e.Type, e.Reason, stamp(now)),
			})...)
		}
		if mem.ended == nil {
			mem.ended = e.DeepCopy()
		}
	} else if mem.ended != nil {
		c.checks[FamilyProvisioning]++
		out = append(out, c.report(key, Violation{
			Family: FamilyProvisioning, Invariant: InvariantRevived, Objects: []ObjectRef{requestRef(pr)},
			Since: mem.ended.LastTransitionTime.Time, Seen: now,
			Message: fmt.Sprintf("%s had ended at %s (%s=True, reason %s) and is no longer ended at %s (%s)",
				requestRef(pr), stamp(mem.ended.LastTransitionTime.Time), mem.ended.Type, mem.ended.Reason, stamp(now), conditionSummary(pr)),
		})...)
	}
	return out
}

// attempts is pr's count of failed attempts (provisioning DetailAttempts).
func attempts(pr *provv1.ProvisioningRequest) int {
	n, err := strconv.Atoi(string(pr.Status.ProvisioningClassDetails[detailAttempts]))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// requestAttempts judges that no Reservation of a failed attempt outlives
// it: the provisioner releases a failed attempt's booking, through the
// API, before it counts the failure (booking.go confirmBooking, then
// lifecycle.go attemptFailed and notFound), so a Reservation seen while
// the count was n must be gone once it is above n. The next attempt's
// Reservations take the same names (bookingName) with new UIDs.
func (c *Checker) requestAttempts(ix *index, pr *provv1.ProvisioningRequest, bookings []*schedv1alpha1.Reservation, mem *requestMemory) []Violation {
	now := ix.now
	if n := attempts(pr); n > mem.attempts {
		for uid := range mem.current {
			mem.stale[uid] = staleBooking{attempt: mem.attempts + 1, since: now}
		}
		mem.current = map[types.UID]bool{}
		mem.attempts = n
	} else if n < mem.attempts {
		mem.attempts = n
	}
	var out []Violation
	present := map[types.UID]bool{}
	c.checks[FamilyProvisioning]++
	for _, r := range bookings {
		present[r.UID] = true
		st, ok := mem.stale[r.UID]
		if !ok {
			mem.current[r.UID] = true
			continue
		}
		if now.Sub(st.since) < c.cfg.Skew {
			continue
		}
		out = append(out, c.report(string(r.UID), Violation{
			Family: FamilyProvisioning, Invariant: InvariantAttemptsOverlap, Objects: []ObjectRef{requestRef(pr), reservationRef(r)},
			Since: st.since, Seen: now,
			Message: fmt.Sprintf("%s (%s) of %s was booked by attempt %d, which failed (the request's count of failed attempts rose to %d by %s), and it still exists at %s beside the later attempts",
				reservationRef(r), phase(r), requestRef(pr), st.attempt, mem.attempts, stamp(st.since), stamp(now)),
		})...)
	}
	for uid := range mem.stale {
		if !present[uid] {
			delete(mem.stale, uid)
		}
	}
	for uid := range mem.current {
		if !present[uid] {
			delete(mem.current, uid)
		}
	}
	return out
}

// requestBookingEnd judges that a Provisioned request ends once its
// booking has: when its Reservations expire the provisioner ends it
// BookingExpired, and when its pods all came, CapacityBookingConsumed
// (lifecycle.go watchBooking). The booking's end is the latest expiry of
// its Reservations the checker has seen (rebook.go bookingEnd); a request
// none of whose Reservations it saw is not judged.
func (c *Checker) requestBookingEnd(ix *index, pr *provv1.ProvisioningRequest, mem *requestMemory) []Violation {
	if !meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned) || ended(pr) != nil ||
		pr.DeletionTimestamp != nil || mem.bookingEnd.IsZero() {
		return nil
	}
	c.checks[FamilyProvisioning]++
	now := ix.now
	limit := mem.bookingEnd.Add(c.cfg.reservationLag() + c.cfg.Grace)
	if !now.After(limit) {
		return nil
	}
	return c.report(string(pr.UID), Violation{
		Family: FamilyProvisioning, Invariant: InvariantStillProvisioned, Objects: []ObjectRef{requestRef(pr)},
		Since: mem.bookingEnd, Limit: limit, Seen: now,
		Message: fmt.Sprintf("%s is still Provisioned and not ended at %s, though its booking ended at %s (the latest expiry of its Reservations seen); it should have ended (BookingExpired or CapacityBookingConsumed) by %s: %s past the limit",
			requestRef(pr), stamp(now), stamp(mem.bookingEnd), stamp(limit), span(now.Sub(limit))),
	})
}
