package provisioning

import (
	"fmt"
	"strconv"

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
// Reservation per node and pod set, pinned to the node the simulation
// chose, holding the requests of the set's pods placed there, owned by the
// pods that consume the request (either consume annotation), living for
// the class's booking duration. A Reservation for one pod is consumed once;
// one for several is shared by its owners until they have all come.
// Pods with host ports get one Reservation each (ports do not add up). Reservations are
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
	// AnnotationBookedPods is how many pods a Reservation books (absent: 1).
	AnnotationBookedPods = "autoscaling.gantry.dev/booked-pods"
)

// BookedPods is how many pods a Reservation of a booking holds room for.
func BookedPods(res *schedv1alpha1.Reservation) int {
	n, err := strconv.Atoi(res.Annotations[AnnotationBookedPods])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// bookingName is the deterministic name of Reservation i of pod set s: an
// attempt resumed after a restart creates nothing twice.
func bookingName(uid types.UID, set, i int) string {
	return fmt.Sprintf("provreq-%s-%d-%d", uid, set, i)
}

// bookingFor is the Reservation that books node for count pods like pod.
func bookingFor(r *provv1.ProvisioningRequest, set, i int, pod *v1.Pod, node string, count int, c Class) *schedv1alpha1.Reservation {
	ports := hostPorts(pod)
	owners := make([]schedv1alpha1.ReservationOwner, 0, 2)
	for _, key := range []string{provv1.AnnotationConsume, provv1.AnnotationConsumeLegacy} {
		owners = append(owners, schedv1alpha1.ReservationOwner{
			Annotation: &schedv1alpha1.OwnerAnnotation{Key: key, Value: r.Name}, Namespace: r.Namespace})
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for name, q := range requests {
		q.Mul(int64(count))
		requests[name] = q
	}
	schedulerName := pod.Spec.SchedulerName
	if schedulerName == "" {
		schedulerName = v1.DefaultSchedulerName
	}
	return &schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:        bookingName(r.UID, set, i),
			Labels:      map[string]string{LabelRequestUID: string(r.UID)},
			Annotations: map[string]string{AnnotationRequest: r.Namespace + "/" + r.Name, AnnotationBookedPods: strconv.Itoa(count)},
		},
		Spec: schedv1alpha1.ReservationSpec{
			Template: schedv1alpha1.ReservationTemplate{
				Requests:      requests,
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
			AllocateOnce: ptr.To(count == 1),
		},
	}
}

// bookingState sums up a request's Reservations, in pods.
type bookingState struct {
	total, available, consumed int
	// pending are not placed yet; unschedulable is the scheduler's reason
	// for one that it could not place.
	pending       int
	unschedulable string
	// failed counts the pods whose room ended before they came, by the
	// Reservation's reason (Expired, NodeDeleted, Preempted, ...).
	failed map[string]int
	nodes  map[string]bool
	// reservations is how many Reservations there are.
	reservations int
}

// BookingPods sums a booking's Reservations up in pods: how many they
// book, and how many of those pods have come.
func BookingPods(rs []schedv1alpha1.Reservation) (booked, came int) {
	s := summarizeBookings(rs)
	return s.total, s.consumed
}

func summarizeBookings(rs []schedv1alpha1.Reservation) bookingState {
	s := bookingState{reservations: len(rs), failed: map[string]int{}, nodes: map[string]bool{}}
	for i := range rs {
		r := &rs[i]
		pods := BookedPods(r)
		came := min(len(r.Status.CurrentOwners), pods)
		s.total += pods
		if r.Status.NodeName != "" {
			s.nodes[r.Status.NodeName] = true
		}
		switch r.Status.Phase {
		case schedv1alpha1.ReservationAvailable:
			s.consumed += came
			s.available += pods - came
		case schedv1alpha1.ReservationSucceeded:
			s.consumed += pods
		case schedv1alpha1.ReservationFailed:
			s.consumed += came
			if pods == came {
				// A shared booking all its pods used, ended by its TTL.
				continue
			}
			reason := "Failed"
			if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionReady); c != nil && c.Reason != "" {
				reason = c.Reason
			}
			s.failed[reason] += pods - came
		default:
			s.pending += pods
			if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionScheduled); c != nil &&
				c.Status == metav1.ConditionFalse && c.Reason == schedv1alpha1.ReasonUnschedulable {
				s.unschedulable = c.Message
			}
		}
	}
	return s
}

// hostPorts are the host ports pod asks for.
func hostPorts(pod *v1.Pod) []v1.ContainerPort {
	var ports []v1.ContainerPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				ports = append(ports, p)
			}
		}
	}
	return ports
}
