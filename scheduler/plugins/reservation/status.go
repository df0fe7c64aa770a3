package reservation

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// bindReservation makes a reservation Available on node. It fails, and the
// scheduler forgets the placement, if the reservation was deleted, recreated
// or left Pending (e.g. expired) meanwhile.
func (pl *Plugin) bindReservation(ctx context.Context, pod *v1.Pod, node string) error {
	client := pl.handle.GantryClientSet().SchedulingV1alpha1().Reservations()
	cur := pl.store.get(pod.UID)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			r, err := client.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("binding reservation %s: %w", pod.Name, err)
			}
			cur = r
		}
		r := cur
		cur = nil // a retry reads the live object
		if r.UID != pod.UID {
			return fmt.Errorf("reservation %s was deleted and recreated while it was being placed", pod.Name)
		}
		if r.Status.Phase != "" && r.Status.Phase != schedv1alpha1.ReservationPending {
			return fmt.Errorf("reservation %s is %s, no longer pending", pod.Name, r.Status.Phase)
		}
		r = r.DeepCopy()
		r.Status.Phase = schedv1alpha1.ReservationAvailable
		r.Status.NodeName = node
		r.Status.Allocatable = r.Spec.Template.Requests
		setCondition(r, schedv1alpha1.ConditionScheduled, metav1.ConditionTrue, schedv1alpha1.ReasonScheduled,
			fmt.Sprintf("placed on node %s", node))
		setCondition(r, schedv1alpha1.ConditionReady, metav1.ConditionTrue, schedv1alpha1.ReasonAvailable,
			"capacity is held for the reservation's owners")
		if _, err := client.UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "gantry-scheduler"}); err != nil {
			return err
		}
		transitions.WithLabelValues(string(schedv1alpha1.ReservationAvailable), schedv1alpha1.ReasonScheduled).Inc()
		return nil
	})
}

func setCondition(r *schedv1alpha1.Reservation, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: r.Generation,
	})
}
