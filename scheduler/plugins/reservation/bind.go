package reservation

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	fwk "k8s.io/kube-scheduler/framework"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// Bind binds reservations: it records the node in the reservation's status
// and makes it Available. An owner pod placed in a reservation is bound here
// too, with the allocation in the Binding's annotations, which kube-apiserver
// copies onto the pod in the same write that sets its node: the annotation
// is the durable record from which any scheduler rebuilds its accounting,
// and no pod is bound without it or carries it unbound. Other pods are left
// to the next binder.
func (pl *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	if reservepod.Is(pod) {
		if err := pl.bindReservation(ctx, pod, node); err != nil {
			return fwk.AsStatus(err)
		}
		return nil
	}
	cs := readState(state)
	if cs == nil || cs.claimed == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	value, err := json.Marshal(schedv1alpha1.ReservationAllocation{Name: cs.claimed.name, UID: cs.claimed.uid,
		Priority: reservepod.VictimPriority(cs.claimed.cached, nil)})
	if err != nil {
		return fwk.AsStatus(err)
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Annotations: map[string]string{schedv1alpha1.AnnotationAllocated: string(value)}},
		Target: v1.ObjectReference{Kind: "Node", Name: node},
	}
	if cacher := pl.handle.APICacher(); cacher != nil {
		onFinish, err := cacher.BindPod(binding)
		if err == nil {
			err = cacher.WaitOnFinish(ctx, onFinish)
		}
		if err != nil {
			return fwk.AsStatus(fmt.Errorf("binding pod into reservation %s: %w", cs.claimed.name, err))
		}
	} else if err := pl.handle.ClientSet().CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(fmt.Errorf("binding pod into reservation %s: %w", cs.claimed.name, err))
	}
	allocations.Inc()
	return nil
}

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
