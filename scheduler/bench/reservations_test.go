package bench

// What the benchmarks read from the reservations they leave. No build tag:
// these helpers, which the scheduler_perf benchmarks use, are tested with the
// rest of the repository.

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

func countPhase(rs []schedv1alpha1.Reservation, phase schedv1alpha1.ReservationPhase) int {
	n := 0
	for i := range rs {
		if rs[i].Status.Phase == phase {
			n++
		}
	}
	return n
}

// statusLag is how long after end the last Succeeded reservation's Ready
// condition changed, never less than zero. Condition times are whole
// seconds (the API's resolution); each is taken as the middle of its second.
func statusLag(rs []schedv1alpha1.Reservation, end time.Time) time.Duration {
	var last time.Time
	for i := range rs {
		if rs[i].Status.Phase != schedv1alpha1.ReservationSucceeded {
			continue
		}
		if c := meta.FindStatusCondition(rs[i].Status.Conditions, schedv1alpha1.ConditionReady); c != nil && c.LastTransitionTime.After(last) {
			last = c.LastTransitionTime.Time
		}
	}
	return max(last.Add(time.Second/2).Sub(end), 0)
}

func TestCountPhaseAndStatusLag(t *testing.T) {
	end := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	r := func(phase schedv1alpha1.ReservationPhase, readyAt time.Time) schedv1alpha1.Reservation {
		var res schedv1alpha1.Reservation
		res.Status.Phase = phase
		res.Status.Conditions = []metav1.Condition{{Type: schedv1alpha1.ConditionReady, LastTransitionTime: metav1.NewTime(readyAt)}}
		return res
	}
	rs := []schedv1alpha1.Reservation{
		r(schedv1alpha1.ReservationSucceeded, end.Add(-10*time.Second)),
		r(schedv1alpha1.ReservationSucceeded, end.Add(3*time.Second)),
		// Not Succeeded: its later condition does not count.
		r(schedv1alpha1.ReservationFailed, end.Add(20*time.Second)),
		r(schedv1alpha1.ReservationAvailable, end.Add(30*time.Second)),
	}
	if got := countPhase(rs, schedv1alpha1.ReservationSucceeded); got != 2 {
		t.Errorf("countPhase(Succeeded) = %d, want 2", got)
	}
	if got := countPhase(rs, schedv1alpha1.ReservationPending); got != 0 {
		t.Errorf("countPhase(Pending) = %d, want 0", got)
	}
	if got, want := statusLag(rs, end), 3500*time.Millisecond; got != want {
		t.Errorf("statusLag = %v, want %v (the last Succeeded at +3 s, the middle of its second)", got, want)
	}
	// All written before the end: no lag, not a negative one.
	if got := statusLag(rs[:1], end); got != 0 {
		t.Errorf("statusLag of writes before the end = %v, want 0", got)
	}
}
