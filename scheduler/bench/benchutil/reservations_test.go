package benchutil

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

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
	if got := CountPhase(rs, schedv1alpha1.ReservationSucceeded); got != 2 {
		t.Errorf("CountPhase(Succeeded) = %d, want 2", got)
	}
	if got := CountPhase(rs, schedv1alpha1.ReservationPending); got != 0 {
		t.Errorf("CountPhase(Pending) = %d, want 0", got)
	}
	if got, want := StatusLag(rs, end), 3500*time.Millisecond; got != want {
		t.Errorf("StatusLag = %v, want %v (the last Succeeded at +3 s, the middle of its second)", got, want)
	}
	// All written before the end: no lag, not a negative one.
	if got := StatusLag(rs[:1], end); got != 0 {
		t.Errorf("StatusLag of writes before the end = %v, want 0", got)
	}
}
