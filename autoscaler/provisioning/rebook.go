package provisioning

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gantry-dev/gantry/autoscaler/provisioning/priority"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/quota"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// A Provisioned request whose booked capacity goes away before its pods
// come (a booked node is deleted, or a Reservation is preempted by a pod
// that could preempt the request's own pods) is booked again elsewhere, as
// long as its booking lasts and the request is valid: the pods that lost
// their room are simulated on the cluster as it is now and get one
// Reservation each, expiring when the rest of the booking does. Only when
// there is no room before then, or the request has been booked again
// maxRebooks times, is it CapacityRevoked: Kueue answers that condition by
// deactivating the workload, so it must mean a real loss.
//
// maxRebooks bounds those rounds (counted in DetailRebooks): each is a
// simulation, and a request whose bookings keep being
// preempted is better told.
const maxRebooks = 5

// lostBooking is what a request's lost Reservations held room for.
type lostBooking struct {
	// pods are, per pod set index, the pods that had not come.
	pods map[int]int
	// reservations are the lost Reservations.
	reservations []schedv1alpha1.Reservation
	// unknown counts pods of Reservations whose pod set cannot be told
	// from their name (not made by this provisioner).
	unknown int
	total   int
	// since is when the first of them was lost.
	since time.Time
}

// lostBookings collects the request's Reservations that lost their node or
// were preempted with pods still to come; cameTo says how many of a
// Reservation's booked pods have come.
func lostBookings(uid types.UID, rs []schedv1alpha1.Reservation, cameTo func(*schedv1alpha1.Reservation) int) lostBooking {
	l := lostBooking{pods: map[int]int{}}
	for i := range rs {
		res := &rs[i]
		if res.Status.Phase != schedv1alpha1.ReservationFailed {
			continue
		}
		ready := readyCondition(res)
		if ready == nil || ready.Reason != schedv1alpha1.ReasonNodeDeleted && ready.Reason != schedv1alpha1.ReasonPreempted {
			continue
		}
		missing := BookedPods(res) - cameTo(res)
		if missing <= 0 {
			continue
		}
		l.total += missing
		l.reservations = append(l.reservations, *res)
		if l.since.IsZero() || ready.LastTransitionTime.Time.Before(l.since) {
			l.since = ready.LastTransitionTime.Time
		}
		set, ok := bookingSet(uid, res.Name)
		if !ok {
			l.unknown += missing
			continue
		}
		l.pods[set] += missing
	}
	return l
}

func readyCondition(res *schedv1alpha1.Reservation) *metav1.Condition {
	return meta.FindStatusCondition(res.Status.Conditions, schedv1alpha1.ConditionReady)
}

// bookingSet is the pod set index a booking's Reservation name carries:
// provreq-<uid>-<set>-<i>, or provreq-<uid>-<set>-r<round>-<k> when booked
// again.
func bookingSet(uid types.UID, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "provreq-"+string(uid)+"-")
	if !ok {
		return 0, false
	}
	set, _, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(set)
	return n, err == nil && n >= 0
}

// rebookName is the name of the k-th Reservation that books lost pods of
// pod set set again in round round: the same in every try of the round, so
// a round resumed after a restart creates nothing twice.
func rebookName(uid types.UID, set, round, k int) string {
	return fmt.Sprintf("provreq-%s-%d-r%d-%d", uid, set, round, k)
}

// bookingEnd is when the request's booking ends: the latest expiry of its
// Reservations.
func bookingEnd(rs []schedv1alpha1.Reservation, c Class) time.Time {
	var end time.Time
	for i := range rs {
		t := rs[i].CreationTimestamp.Add(c.BookingDuration)
		if e := rs[i].Spec.Expires; e != nil {
			t = e.Time
		} else if ttl := rs[i].Spec.TTL; ttl != nil {
			t = rs[i].CreationTimestamp.Add(ttl.Duration)
		}
		if t.After(end) {
			end = t
		}
	}
	return end
}

// rebook books the lost part of a Provisioned request's booking again, or
// revokes the request when it cannot.
func (r *Reconciler) rebook(ctx context.Context, rq *request, bookings []schedv1alpha1.Reservation, lost lostBooking) (reconcile.Result, error) {
	pr := rq.pr
	now := r.Clock.Now()
	what := fmt.Sprintf("%d booked pods lost their capacity (%d reservations lost their node or were preempted)", lost.total, len(lost.reservations))
	// Tried again for as long as a new booking may take to be placed
	// (PlacementTimeout) after the loss, within the booking's time and
	// the request's validity.
	end := bookingEnd(bookings, rq.class)
	until := end
	if rq.deadline.Before(until) {
		until = rq.deadline
	}
	if r.PlacementTimeout > 0 && !lost.since.IsZero() && lost.since.Add(r.PlacementTimeout).Before(until) {
		until = lost.since.Add(r.PlacementTimeout)
	}
	round := rq.rebooks() + 1
	switch {
	case !now.Before(end) || !now.Before(rq.deadline):
		return r.revoke(ctx, rq, what+"; the booking or the request's validity has ended")
	case lost.unknown > 0:
		return r.revoke(ctx, rq, what+"; not all of them are the provisioner's to book again")
	case round > maxRebooks:
		return r.revoke(ctx, rq, fmt.Sprintf("%s; booked again %d times already", what, maxRebooks))
	}
	sets, missing, err := r.podSets(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	if missing != "" {
		return r.revoke(ctx, rq, fmt.Sprintf("%s; its PodTemplate %s is gone", what, missing))
	}
	if err := r.admitPodSets(ctx, pr, sets); err != nil {
		if ar := (*admissionRefusal)(nil); errors.As(err, &ar) {
			return r.revoke(ctx, rq, fmt.Sprintf("%s; %v", what, ar))
		}
		return reconcile.Result{}, err
	}
	var want []simulator.PodSet
	var index []int
	for _, si := range slices.Sorted(maps.Keys(lost.pods)) {
		if si >= len(sets) {
			return r.revoke(ctx, rq, fmt.Sprintf("%s; pod set %d is not the request's", what, si))
		}
		// Booked again no larger than they were booked, and checked
		// against the namespace's quotas again (placeAgainAssumed): the
		// PodTemplate may have moved them to another quota's scope (a
		// priority class) since.
		if name, ok := grew(sets[si].Pod, lost.reservations, pr.UID, si); ok {
			return r.revoke(ctx, rq, fmt.Sprintf("%s; its PodTemplate now asks for more than was booked (%s)", what, name))
		}
		want = append(want, simulator.PodSet{Name: sets[si].Name, Pod: sets[si].Pod, Count: lost.pods[si]})
		index = append(index, si)
	}
	unschedulable, err := r.placeAgain(ctx, rq, want, index, round, end)
	if rej, ok := priority.AsRejection(err); ok {
		return r.revoke(ctx, rq, fmt.Sprintf("%s; %v", what, rej))
	}
	if inv := (*simulator.InvalidPodSet)(nil); errors.As(err, &inv) {
		return r.revoke(ctx, rq, fmt.Sprintf("%s; %v", what, inv))
	}
	if qe := (*quota.ExceededError)(nil); errors.As(err, &qe) {
		return r.revoke(ctx, rq, fmt.Sprintf("%s; booking them again would exceed the namespace's quota: %v", what, qe))
	}
	if le := (*bookingLimitError)(nil); errors.As(err, &le) {
		return r.revoke(ctx, rq, fmt.Sprintf("%s; %v", what, le))
	}
	if be := (*simulator.BudgetExceeded)(nil); errors.As(err, &be) {
		return r.revoke(ctx, rq, fmt.Sprintf("%s; %s", what, r.budgetMessage(be)))
	}
	if errors.Is(err, errPutBack) {
		return reconcile.Result{RequeueAfter: putBackRetry}, nil
	}
	if errors.Is(err, errRoomTaken) {
		return reconcile.Result{RequeueAfter: readinessPoll}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if unschedulable != nil {
		if !now.Before(until) {
			return r.revoke(ctx, rq, fmt.Sprintf("%s; no room elsewhere until %s: %v", what, until.UTC().Format(time.RFC3339), unschedulable))
		}
		retry := min(rq.class.backoff(1), until.Sub(now)+time.Second)
		r.Recorder.Eventf(pr, v1.EventTypeWarning, ReasonBookingLost, "%s; no room elsewhere yet (%v); trying again until %s",
			what, unschedulable, until.UTC().Format(time.RFC3339))
		return reconcile.Result{RequeueAfter: retry}, nil
	}
	// The lost Reservations go before the round is counted: a restart in
	// between repeats the round under the same names.
	var errs []error
	for i := range lost.reservations {
		if err := r.Client.Delete(ctx, &lost.reservations[i]); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting lost booking %s: %w", lost.reservations[i].Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	rq.recordRebooks(round)
	if err := r.writeStatus(ctx, rq); err != nil {
		return reconcile.Result{}, err
	}
	r.Recorder.Eventf(pr, v1.EventTypeNormal, ReasonCapacityRebooked, "%s; booked again elsewhere until %s", what, end.UTC().Format(time.RFC3339))
	return reconcile.Result{}, nil
}

// placeAgain simulates the lost pods and books them where the simulation
// put them, one Reservation per node and pod set, until end, as every
// booking is made (simulateAndCommit); nil when they are booked.
func (r *Reconciler) placeAgain(ctx context.Context, rq *request, want []simulator.PodSet, index []int, round int, end time.Time) (*simulator.Unschedulable, error) {
	pr := rq.pr
	tk, err := r.theTurns().enter(client.ObjectKeyFromObject(pr))
	if err != nil {
		return nil, err
	}
	defer tk.done()
	if err := priority.Resolve(ctx, r.PriorityClasses, r.Client, pr.Namespace, want); err != nil {
		return nil, err
	}
	sim, todo, err := r.simulateAndCommit(ctx, rq, tk, trial{
		sets: want,
		// The request's own bookings that were not lost count as held.
		book: func(p simulator.Placement) []*schedv1alpha1.Reservation {
			todo := bookingsFor(pr, rq.class, want, index, p, func(set, k int) string { return rebookName(pr.UID, set, round, k) })
			for _, res := range todo {
				res.Spec.TTL, res.Spec.Expires = nil, &metav1.Time{Time: end}
			}
			return todo
		},
	})
	tk.done()
	if err != nil || sim.unschedulable != nil {
		return sim.unschedulable, err
	}
	return nil, r.createAssumed(ctx, todo)
}

// grew reports whether pod requests more of a resource (named) than the
// lost Reservations of pod set set booked for each of their pods.
func grew(pod *v1.Pod, lost []schedv1alpha1.Reservation, uid types.UID, set int) (v1.ResourceName, bool) {
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for i := range lost {
		if s, ok := bookingSet(uid, lost[i].Name); !ok || s != set {
			continue
		}
		booked := lost[i].Spec.Template.Requests
		for name, q := range want {
			q = q.DeepCopy()
			q.Mul(int64(BookedPods(&lost[i])))
			if have := booked[name]; q.Cmp(have) > 0 {
				return name, true
			}
		}
	}
	return "", false
}
