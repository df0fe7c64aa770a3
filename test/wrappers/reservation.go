package wrappers

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// ReservationWrapper wraps a Reservation.
type ReservationWrapper struct{ schedv1alpha1.Reservation }

// MakeReservation returns a reservation of requests (name, quantity pairs)
// with no owners yet.
func MakeReservation(name string, requests ...string) *ReservationWrapper {
	return &ReservationWrapper{schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedv1alpha1.ReservationSpec{
			Template: schedv1alpha1.ReservationTemplate{Requests: ResourceList(requests...), SchedulerName: DefaultSchedulerName},
		},
	}}
}

// Obj returns the reservation.
func (r *ReservationWrapper) Obj() *schedv1alpha1.Reservation { return &r.Reservation }

// Label sets a label.
func (r *ReservationWrapper) Label(k, v string) *ReservationWrapper {
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	r.Labels[k] = v
	return r
}

// NodeName pins the reservation to a node.
func (r *ReservationWrapper) NodeName(node string) *ReservationWrapper {
	r.Spec.Template.NodeName = node
	return r
}

// OwnerLabels adds an owner: the pods of namespace with these labels.
func (r *ReservationWrapper) OwnerLabels(namespace string, labels map[string]string) *ReservationWrapper {
	r.Spec.Owners = append(r.Spec.Owners, schedv1alpha1.ReservationOwner{
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
		Namespace:     namespace,
	})
	return r
}

// OwnerPod adds an owner: one pod by namespace and name.
func (r *ReservationWrapper) OwnerPod(namespace, name string) *ReservationWrapper {
	r.Spec.Owners = append(r.Spec.Owners, schedv1alpha1.ReservationOwner{
		Object: &schedv1alpha1.OwnerReference{Namespace: namespace, Name: name},
	})
	return r
}

// OwnerController adds an owner: the pods whose controller is kind/name in
// namespace.
func (r *ReservationWrapper) OwnerController(namespace, apiVersion, kind, name string) *ReservationWrapper {
	r.Spec.Owners = append(r.Spec.Owners, schedv1alpha1.ReservationOwner{
		Controller: &schedv1alpha1.OwnerReference{Namespace: namespace, APIVersion: apiVersion, Kind: kind, Name: name},
	})
	return r
}

// TTL sets how long the reservation lives after creation.
func (r *ReservationWrapper) TTL(d time.Duration) *ReservationWrapper {
	r.Spec.TTL = &metav1.Duration{Duration: d}
	return r
}

// AllocateOnce sets spec.allocateOnce.
func (r *ReservationWrapper) AllocateOnce(once bool) *ReservationWrapper {
	r.Spec.AllocateOnce = ptr.To(once)
	return r
}

// Priority sets the reservation's priority.
func (r *ReservationWrapper) Priority(p int32) *ReservationWrapper {
	r.Spec.Template.Priority = ptr.To(p)
	return r
}

// NodeSelector adds a node selector term of the template.
func (r *ReservationWrapper) NodeSelector(k, v string) *ReservationWrapper {
	if r.Spec.Template.NodeSelector == nil {
		r.Spec.Template.NodeSelector = map[string]string{}
	}
	r.Spec.Template.NodeSelector[k] = v
	return r
}

// UID sets the reservation's UID (for tests without an API server).
func (r *ReservationWrapper) UID(uid string) *ReservationWrapper {
	r.ObjectMeta.UID = types.UID(uid)
	return r
}

// Available sets the status of a reservation the scheduler placed on node
// (for tests without a scheduler).
func (r *ReservationWrapper) Available(node string) *ReservationWrapper {
	r.Status.Phase = schedv1alpha1.ReservationAvailable
	r.Status.NodeName = node
	return r
}

// Generation sets metadata.generation (for tests without an API server).
func (r *ReservationWrapper) Generation(g int64) *ReservationWrapper {
	r.ObjectMeta.Generation = g
	return r
}

// SchedulerName sets the profile that schedules the reservation.
func (r *ReservationWrapper) SchedulerName(name string) *ReservationWrapper {
	r.Spec.Template.SchedulerName = name
	return r
}

// PreemptionPolicy sets the template's preemptionPolicy.
func (r *ReservationWrapper) PreemptionPolicy(p v1.PreemptionPolicy) *ReservationWrapper {
	r.Spec.Template.PreemptionPolicy = &p
	return r
}

// Annotation sets an annotation.
func (r *ReservationWrapper) Annotation(k, v string) *ReservationWrapper {
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	r.Annotations[k] = v
	return r
}

// Phase sets status.phase (for tests without a scheduler).
func (r *ReservationWrapper) Phase(p schedv1alpha1.ReservationPhase) *ReservationWrapper {
	r.Status.Phase = p
	return r
}

// StatusNodeName sets status.nodeName, the node the reservation was
// placed on (for tests without a scheduler).
func (r *ReservationWrapper) StatusNodeName(node string) *ReservationWrapper {
	r.Status.NodeName = node
	return r
}

// Condition adds a status condition.
func (r *ReservationWrapper) Condition(typ string, status metav1.ConditionStatus, reason, message string) *ReservationWrapper {
	r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message})
	return r
}

// Allocated sets status.allocated (name, quantity pairs): what the owner
// pods placed in it take.
func (r *ReservationWrapper) Allocated(requests ...string) *ReservationWrapper {
	r.Status.Allocated = ResourceList(requests...)
	return r
}

// CurrentOwner adds an owner pod placed in the reservation to
// status.currentOwners.
func (r *ReservationWrapper) CurrentOwner(ref v1.ObjectReference) *ReservationWrapper {
	r.Status.CurrentOwners = append(r.Status.CurrentOwners, ref)
	return r
}
