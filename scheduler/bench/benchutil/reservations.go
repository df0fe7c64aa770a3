package benchutil

// What the benchmarks make of reservations and read from those they leave.

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// OwnerReservation is the benchmarks' i-th reservation, "bench-<i>": it
// holds one pod's requests (100m CPU, 500Mi memory) for the pods of
// namespace "owners" labelled app=owner.
func OwnerReservation(i int) *schedv1alpha1.Reservation {
	return wrappers.MakeReservation(fmt.Sprintf("bench-%d", i), "cpu", "100m", "memory", "500Mi").
		OwnerLabels("owners", map[string]string{"app": "owner"}).Obj()
}

// CountPhase is how many of rs are in phase.
func CountPhase(rs []schedv1alpha1.Reservation, phase schedv1alpha1.ReservationPhase) int {
	n := 0
	for i := range rs {
		if rs[i].Status.Phase == phase {
			n++
		}
	}
	return n
}

// StatusLag is how long after end the last Succeeded reservation's Ready
// condition changed, never less than zero. Condition times are whole
// seconds (the API's resolution); each is taken as the middle of its second.
func StatusLag(rs []schedv1alpha1.Reservation, end time.Time) time.Duration {
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
