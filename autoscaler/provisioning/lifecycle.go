package provisioning

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// DefaultMaxPodsPerRequest is the default of --max-pods-per-request.
// Upstream has no such limit. The simulation deep-copies every pod (its
// work is bounded by the simulation budget); 5000 is the largest
// cluster in Kubernetes' scalability thresholds (5000 nodes), one pod per
// node. 5000 pods on 5000 nodes simulate in 1.5 s with 210 MB allocated
// (1000 pods: 0.55 s, 170 MB), on a loaded 2-core machine.
const DefaultMaxPodsPerRequest = 5000

// DefaultMaxBookingsPerNamespace is the default of
// --max-bookings-per-namespace. Each Reservation is placed by the scheduler
// and written by its status controller, whatever it holds: a namespace's
// requests could otherwise make one per node of the cluster each (pods
// with host ports get a Reservation each). The default is the most one
// request can make (DefaultMaxPodsPerRequest pods, one Reservation each),
// so a request the provisioner takes is never too big for it alone.
const DefaultMaxBookingsPerNamespace = DefaultMaxPodsPerRequest

// maxBookingsPerNamespace is the limit on a namespace's live Reservations
// (the default when MaxBookingsPerNamespace is not set).
func (r *Reconciler) maxBookingsPerNamespace() int {
	if r.MaxBookingsPerNamespace > 0 {
		return r.MaxBookingsPerNamespace
	}
	return DefaultMaxBookingsPerNamespace
}

// maxPodsPerRequest is the limit on a request's pods (the default when
// MaxPodsPerRequest is not set).
func (r *Reconciler) maxPodsPerRequest() int {
	if r.MaxPodsPerRequest > 0 {
		return r.MaxPodsPerRequest
	}
	return DefaultMaxPodsPerRequest
}

// serve moves a request of a served class (rq.class) along: accept it,
// check quota, simulate, scale up (atomic classes), book, confirm, and
// then watch the booking until it ends.
func (r *Reconciler) serve(ctx context.Context, rq *request) (reconcile.Result, error) {
	now := r.Clock.Now()
	pr, class := rq.pr, rq.class
	params, err := parameters(pr, class)
	if err != nil {
		return r.fail(ctx, rq, ReasonInvalidParameter, err.Error())
	}
	rq.params = params
	rq.deadline = pr.CreationTimestamp.Add(params.ValidUntil)
	if rq.is(provv1.ConditionProvisioned) {
		return r.watchBooking(ctx, rq)
	}
	// Before anything that grows with the number of pods: the CRD, like
	// upstream's, bounds each count by 2^31-1 only.
	if n, limit := rq.requestedPods(), r.maxPodsPerRequest(); n > int64(limit) {
		return r.fail(ctx, rq, ReasonTooManyPods, fmt.Sprintf(
			"the request asks for %d pods (the sum of spec.podSets[*].count), more than the %d pods per request this provisioner serves (--max-pods-per-request)", n, limit))
	}

	sets, missing, err := r.podSets(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	if missing != "" {
		if now.After(rq.deadline) {
			return r.fail(ctx, rq, ReasonPodTemplateNotFound,
				fmt.Sprintf("PodTemplate %s/%s did not appear within the request's validity (%s)", pr.Namespace, missing, params.ValidUntil))
		}
		msg := fmt.Sprintf("PodTemplate %s/%s not found; waiting for it until %s", pr.Namespace, missing, rq.deadline.UTC().Format(time.RFC3339))
		if rq.setCondition(provv1.ConditionAccepted, metav1.ConditionFalse, ReasonPodTemplateNotFound, msg) {
			r.Recorder.Event(pr, v1.EventTypeWarning, ReasonPodTemplateNotFound, msg)
			if err := r.writeStatus(ctx, rq); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{RequeueAfter: min(class.BackoffInitial, rq.deadline.Sub(now)+time.Second)}, nil
	}
	rq.sets = sets
	accepted := fmt.Sprintf("served by gantry-provisioner: class %s, handler %s", class.Name, class.Handler)
	for _, why := range params.Ignored {
		accepted += "; " + why
	}
	// Accepted is written with the request's next status write (in the
	// common case the one that says Provisioned), not in a write of its
	// own; the warnings about ignored parameters are recorded then. The
	// condition needs no event of its own: the decision has one.
	if rq.setCondition(provv1.ConditionAccepted, metav1.ConditionTrue, ReasonAccepted, accepted) {
		for _, why := range params.Ignored {
			rq.onWritten = append(rq.onWritten, requestEvent{v1.EventTypeWarning, ReasonInvalidParameter, why})
		}
	}

	// An attempt in progress: its booking is being placed by the scheduler.
	bookings, err := r.bookings(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(bookings) > 0 {
		return r.confirmBooking(ctx, rq, bookings)
	}
	if r.assumedNotCached(pr.UID, nil) > 0 {
		// Its booking was created a moment ago and the cache does not show
		// it yet (the request's own status write can come back first):
		// simulating again would book the request twice, under the same
		// Reservation names. Its Reservations' events wake it. A create
		// left in doubt (a timeout) is waited for while it stays assumed
		// (assumeFor).
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	// Or, for an atomic class, its nodes are being added (scaleup.go).
	if rq.scaleUpInFlight() {
		return r.followScaleUp(ctx, rq)
	}

	// A new attempt only once the backoff of the last failed one is over
	// (the validity window's end is decided then too).
	if wait := rq.nextAttempt().Sub(now); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}

	// The quota check runs in placeAndBook, before the simulation and
	// again under bookMu at its commit.
	return r.simulateAndBook(ctx, rq)
}

// attemptFailed ends an attempt that failed after its simulation: its
// booking was lost or not placed in time, or its scale-up's nodes did not
// come up or no longer hold the pods. A scale-up attempt of the request's
// own is rolled back (every node it created, scaleup.go) and any recorded
// attempt forgotten; then the failure is recorded (notFound).
func (r *Reconciler) attemptFailed(ctx context.Context, rq *request, why string) (reconcile.Result, error) {
	r.unassumeScaleUp(rq.pr.UID)
	if rq.scaleUpInFlight() {
		if err := r.rollBackAttempt(ctx, rq, why); err != nil {
			return reconcile.Result{}, err
		}
	}
	rq.forgetAttempt()
	return r.notFound(ctx, rq, why)
}

// notFound records an attempt that found no capacity: Failed with
// noRetry or after the validity window, else retried after a backoff.
func (r *Reconciler) notFound(ctx context.Context, rq *request, why string) (reconcile.Result, error) {
	pr := rq.pr
	now := r.Clock.Now()
	if rq.params.NoRetry {
		return r.fail(ctx, rq, provv1.ReasonCapacityIsNotFound, why)
	}
	if !now.Before(rq.deadline) {
		return r.fail(ctx, rq, ReasonValidityExpired,
			fmt.Sprintf("no capacity within the request's validity (%s): %s", rq.params.ValidUntil, why))
	}
	retry := rq.recordFailedAttempt(now)
	if err := r.writeMetadata(ctx, rq); err != nil {
		return reconcile.Result{}, err
	}
	msg := fmt.Sprintf("%s; attempt %d, retrying in %s", why, rq.attempts(), retry.Round(time.Second))
	if rq.setCondition(provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound, msg) {
		r.Recorder.Event(pr, v1.EventTypeNormal, provv1.ReasonCapacityIsNotFound, msg)
	}
	if err := r.writeStatus(ctx, rq); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: retry}, nil
}

// fail makes the request Failed, for good, and releases its booking.
func (r *Reconciler) fail(ctx context.Context, rq *request, reason, msg string) (reconcile.Result, error) {
	pr := rq.pr
	r.unassumeScaleUp(pr.UID)
	if rq.scaleUpInFlight() {
		// A failed request leaves no partial scale-up behind.
		if err := r.rollBackAttempt(ctx, rq, msg); err != nil {
			return reconcile.Result{}, err
		}
	}
	rq.setCondition(provv1.ConditionFailed, metav1.ConditionTrue, reason, msg)
	if rq.condition(provv1.ConditionProvisioned) == nil {
		rq.setCondition(provv1.ConditionProvisioned, metav1.ConditionFalse, reason, msg)
	}
	if err := r.writeStatus(ctx, rq); err != nil {
		return reconcile.Result{}, err
	}
	r.Recorder.Event(pr, v1.EventTypeWarning, reason, msg)
	observeResult(rq.class, resultFailed)
	return reconcile.Result{}, r.release(ctx, rq, "the request failed")
}

// watchBooking follows a Provisioned request's booking: it ends when its
// pods have all come (BookingExpired, reason CapacityBookingConsumed, as
// cluster-autoscaler says it), when it expires first (BookingExpired), or
// when booked capacity goes away and cannot be booked again elsewhere
// (CapacityRevoked; see rebook), or when every Reservation of the booking
// is gone (deleted, or removed after it ended while the provisioner was
// not watching): consumed if the request's pods have all come, else
// CapacityRevoked.
func (r *Reconciler) watchBooking(ctx context.Context, rq *request) (reconcile.Result, error) {
	pr := rq.pr
	bookings, err := r.bookings(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	want := rq.requestedPods()
	if len(bookings) == 0 {
		gone, err := r.bookingGone(ctx, pr)
		if err != nil || !gone {
			return reconcile.Result{}, err
		}
		r.trackBookings(pr.UID, 0)
		if came := r.cameElsewhere(pr, nil, int(want)); int64(came) >= want {
			msg := fmt.Sprintf("all %d pods of the request came; its booking's Reservations are gone", want)
			return r.end(ctx, rq, provv1.ConditionBookingExpired, ReasonCapacityBookingConsumed, v1.EventTypeNormal, msg)
		}
		return r.revoke(ctx, rq, "every Reservation of the booking is gone (deleted, or removed after it ended while the provisioner was not "+
			"watching) before all of the request's pods came")
	}
	st := summarizeBookings(bookings, r.cameTo)
	r.trackBookings(pr.UID, st.available+st.pending)
	if lost := lostBookings(pr.UID, bookings, r.cameTo); lost.total > 0 {
		return r.rebook(ctx, rq, bookings, lost)
	}
	elsewhere := 0
	if st.total > 0 && int64(st.consumed) < want {
		elsewhere = r.cameElsewhere(pr, bookings, int(want)-st.consumed)
	}
	switch {
	case st.failed[schedv1alpha1.ReasonExpired] > 0:
		msg := fmt.Sprintf("the booking expired after %s with %d of %d booked pods not started", rq.class.BookingDuration, st.total-st.consumed, st.total)
		return r.end(ctx, rq, provv1.ConditionBookingExpired, ReasonBookingExpired, v1.EventTypeWarning, msg)
	case st.total > 0 && int64(st.consumed) >= want:
		msg := fmt.Sprintf("all %d pods of the request came to their booking", st.consumed)
		return r.end(ctx, rq, provv1.ConditionBookingExpired, ReasonCapacityBookingConsumed, v1.EventTypeNormal, msg)
	case st.total > 0 && int64(st.consumed+elsewhere) >= want:
		msg := fmt.Sprintf("all %d pods of the request came: %d to their booking, %d to nodes outside it", want, st.consumed, elsewhere)
		return r.end(ctx, rq, provv1.ConditionBookingExpired, ReasonCapacityBookingConsumed, v1.EventTypeNormal, msg)
	}
	if why := r.evictedWorkload(ctx, pr); why != "" {
		msg := fmt.Sprintf("%s; the booking of its %d pods that had not come is released", why, st.total-st.consumed)
		return r.end(ctx, rq, provv1.ConditionBookingExpired, ReasonWorkloadEvicted, v1.EventTypeNormal, msg)
	}
	return reconcile.Result{}, nil
}

// bookingGone reports whether a Provisioned request whose cache shows no
// Reservation has none: none of its own creates is still on its way to the
// cache, and the API server lists none either.
func (r *Reconciler) bookingGone(ctx context.Context, pr *provv1.ProvisioningRequest) (bool, error) {
	if len(r.withAssumedOf(pr.UID, nil)) > 0 {
		return false, nil
	}
	if r.APIReader == nil {
		return true, nil
	}
	var list schedv1alpha1.ReservationList
	if err := r.APIReader.List(ctx, &list, client.MatchingLabels{LabelRequestUID: string(pr.UID)}); err != nil {
		return false, err
	}
	return len(list.Items) == 0, nil
}

// revoke ends a Provisioned request whose booked capacity went away.
func (r *Reconciler) revoke(ctx context.Context, rq *request, msg string) (reconcile.Result, error) {
	return r.end(ctx, rq, provv1.ConditionCapacityRevoked, ReasonCapacityRevoked, v1.EventTypeWarning, msg)
}

// end sets the terminal condition typ of a Provisioned request and releases
// what is left of its booking.
func (r *Reconciler) end(ctx context.Context, rq *request, typ, reason, eventType, msg string) (reconcile.Result, error) {
	rq.setCondition(typ, metav1.ConditionTrue, reason, msg)
	if err := r.writeStatus(ctx, rq); err != nil {
		return reconcile.Result{}, err
	}
	r.Recorder.Event(rq.pr, eventType, reason, msg)
	return reconcile.Result{}, r.release(ctx, rq, msg)
}
