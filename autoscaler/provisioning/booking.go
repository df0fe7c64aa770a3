package provisioning

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// A booking is the capacity a Provisioned request holds for its pods: one
// Reservation per pod, pinned to the node the simulation chose, owned by
// the pods that consume the request (either consume annotation), living
// for the class's booking duration, consumed once. Reservations are
// cluster-scoped and cannot be owned by a namespaced request: the request's
// UID label ties them to it, and the request's finalizer removes them.
const (
	// LabelRequestUID is on every Reservation of a request's booking.
	LabelRequestUID = "autoscaling.gantry.dev/provisioning-request-uid"
	// AnnotationRequest names the request, namespace/name, on its Reservations.
	AnnotationRequest = "autoscaling.gantry.dev/provisioning-request"
	// Finalizer keeps a request until its booking is released.
	Finalizer = "autoscaling.gantry.dev/release-booking"
	// AnnotationAttempts counts a request's failed attempts (for backoff);
	// all the provisioner's state is in the API.
	AnnotationAttempts = "autoscaling.gantry.dev/attempts"
	// AnnotationNextAttempt is when the next attempt is due (RFC 3339):
	// the request's own updates wake the controller, the backoff holds.
	AnnotationNextAttempt = "autoscaling.gantry.dev/next-attempt"
)

// bookingName is the deterministic name of the Reservation for pod i of pod
// set s: an attempt resumed after a restart creates nothing twice.
func bookingName(uid types.UID, set, i int) string {
	return fmt.Sprintf("provreq-%s-%d-%d", uid, set, i)
}

// bookingFor is the Reservation that books node for one pod like pod.
func bookingFor(r *provv1.ProvisioningRequest, set, i int, pod *v1.Pod, node string, c Class) *schedv1alpha1.Reservation {
	var ports []v1.ContainerPort
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.HostPort > 0 {
				ports = append(ports, p)
			}
		}
	}
	owners := make([]schedv1alpha1.ReservationOwner, 0, 2)
	for _, key := range []string{provv1.AnnotationConsume, provv1.AnnotationConsumeLegacy} {
		owners = append(owners, schedv1alpha1.ReservationOwner{
			Annotation: &schedv1alpha1.OwnerAnnotation{Key: key, Value: r.Name}, Namespace: r.Namespace})
	}
	schedulerName := pod.Spec.SchedulerName
	if schedulerName == "" {
		schedulerName = v1.DefaultSchedulerName
	}
	return &schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:        bookingName(r.UID, set, i),
			Labels:      map[string]string{LabelRequestUID: string(r.UID)},
			Annotations: map[string]string{AnnotationRequest: r.Namespace + "/" + r.Name},
		},
		Spec: schedv1alpha1.ReservationSpec{
			Template: schedv1alpha1.ReservationTemplate{
				Requests:      resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}),
				NodeName:      node,
				Tolerations:   pod.Spec.Tolerations,
				HostPorts:     ports,
				Priority:      pod.Spec.Priority,
				SchedulerName: schedulerName,
				// The simulation found the room free: a booking takes
				// nothing from running pods.
				PreemptionPolicy: ptr.To(v1.PreemptNever),
			},
			Owners:       owners,
			TTL:          &metav1.Duration{Duration: c.BookingDuration},
			AllocateOnce: ptr.To(true),
		},
	}
}

// bookingState sums up a request's Reservations.
type bookingState struct {
	total, available, consumed int
	// pending are not placed yet; unschedulable is the scheduler's reason
	// for one that it could not place.
	pending       int
	unschedulable string
	// failed counts the Reservations that ended without being consumed,
	// by reason (Expired, NodeDeleted, Preempted, ...).
	failed map[string]int
	nodes  map[string]bool
}

func summarizeBookings(rs []schedv1alpha1.Reservation) bookingState {
	s := bookingState{total: len(rs), failed: map[string]int{}, nodes: map[string]bool{}}
	for i := range rs {
		r := &rs[i]
		if r.Status.NodeName != "" {
			s.nodes[r.Status.NodeName] = true
		}
		switch r.Status.Phase {
		case schedv1alpha1.ReservationAvailable:
			s.available++
		case schedv1alpha1.ReservationSucceeded:
			s.consumed++
		case schedv1alpha1.ReservationFailed:
			reason := "Failed"
			if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionReady); c != nil && c.Reason != "" {
				reason = c.Reason
			}
			s.failed[reason]++
		default:
			s.pending++
			if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionScheduled); c != nil &&
				c.Status == metav1.ConditionFalse && c.Reason == schedv1alpha1.ReasonUnschedulable {
				s.unschedulable = c.Message
			}
		}
	}
	return s
}
