package provisioning

import (
	"github.com/gantry-dev/gantry/autoscaler/provisioning/priority"
)

// This file is a ProvisioningRequest's vocabulary as Gantry writes it:
// every condition reason, event reason, detail key, annotation, label,
// finalizer and parameter name the provisioner defines. The condition
// types (Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked),
// upstream's reasons (CapacityIsFound, CapacityIsNotFound,
// CapacityIsProvisioned), upstream's parameters and the consume
// annotations belong to the API and are crds/provisioning/v1's (provv1).
// The request's methods that read and write its recorded state are in
// request.go.

// Reasons of the request's conditions (and of the events that say the
// same), beyond upstream's.
const (
	// ReasonAccepted (Accepted=True): the provisioner serves the request.
	ReasonAccepted = "Accepted"
	// ReasonPodTemplateNotFound (Accepted=False, then Failed): a pod set's
	// PodTemplate does not exist.
	ReasonPodTemplateNotFound = "PodTemplateNotFound"
	// ReasonInvalidParameter (Failed): a parameter cannot be read; also the
	// event of a parameter that is ignored.
	ReasonInvalidParameter = "InvalidParameter"
	// ReasonTooManyPods (Failed): the request asks for more pods than
	// Reconciler.MaxPodsPerRequest.
	ReasonTooManyPods = "TooManyPods"
	// ReasonPodsNotAdmitted (Failed): admission refused a pod set's pod in
	// the request's namespace (a dry-run create; admission.go).
	ReasonPodsNotAdmitted = "PodsNotAdmitted"
	// ReasonTooManyBookings (Failed): the request's booking alone needs
	// more Reservations than Reconciler.MaxBookingsPerNamespace; also
	// (Provisioned=False, retried) a booking that does not fit beside the
	// namespace's live ones.
	ReasonTooManyBookings = "TooManyBookings"
	// ReasonSimulationBudgetExceeded fails a request whose simulation
	// needed more work than one attempt may do (--simulation-budget) or
	// more time (--simulation-timeout).
	ReasonSimulationBudgetExceeded = "SimulationBudgetExceeded"
	// ReasonQuotaExceeded (Failed): the request's pods do not fit its
	// namespace's ResourceQuotas (package quota).
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonPriorityClassNotFound (Failed): a template names a
	// PriorityClass that does not exist (kube-apiserver would refuse such a
	// pod; package priority).
	ReasonPriorityClassNotFound = "PriorityClassNotFound"
	// ReasonPriorityClassForbidden (Failed): a template names a system
	// PriorityClass in a namespace that may not use it (package priority).
	ReasonPriorityClassForbidden = "PriorityClassForbidden"
	// ReasonUnsupportedPods (Failed): no pod like a set's could be
	// scheduled (its resource claims name what does not exist), or
	// booked (its pods request nothing).
	ReasonUnsupportedPods = "UnsupportedPods"
	// ReasonValidityExpired (Failed): no capacity within the request's
	// validity.
	ReasonValidityExpired = "ValidityExpired"
	// ReasonBooking (Provisioned=False): capacity was found and its
	// Reservations are being placed.
	ReasonBooking = "BookingCapacity"
	// ReasonBookingExpired (BookingExpired): the booking ended before all
	// the request's pods came.
	ReasonBookingExpired = "BookingExpired"
	// ReasonCapacityBookingConsumed (BookingExpired): every pod of the
	// request came to its booking (cluster-autoscaler's reason).
	ReasonCapacityBookingConsumed = "CapacityBookingConsumed"
	// ReasonWorkloadEvicted (BookingExpired): Kueue evicted the workload
	// the request was made for before all its pods came (kueue.go).
	ReasonWorkloadEvicted = "WorkloadEvicted"
	// ReasonCapacityRevoked (CapacityRevoked): booked capacity went away
	// and could not be booked again (rebook.go).
	ReasonCapacityRevoked = "CapacityRevoked"

	// ReasonScalingUp (Provisioned=False): an atomic scale-up attempt is
	// adding nodes.
	ReasonScalingUp = "ScalingUp"
	// ReasonNoNodeGroupFits (Failed): a pod set's pod fits no node group's
	// empty node; no scale-up can ever help.
	ReasonNoNodeGroupFits = "NoNodeGroupFits"
)

// Reasons of events only.
const (
	// ReasonBookingReleased: the request's booking was released.
	ReasonBookingReleased = "BookingReleased"
	// ReasonBookingLost: booked capacity went away and is being booked
	// again.
	ReasonBookingLost = "BookingLost"
	// ReasonCapacityRebooked: it was.
	ReasonCapacityRebooked = "CapacityRebooked"
	// ReasonScaleUpRolledBack: the nodes of a failed scale-up attempt were
	// deleted.
	ReasonScaleUpRolledBack = "ScaleUpRolledBack"
	// ReasonNodesRemoved: a deleted request's unused nodes were deleted.
	ReasonNodesRemoved = "NodesRemoved"
)

// The provisioner's own record of a request's attempts, in the request's
// status.provisioningClassDetails, which tenants cannot write (see the
// package doc). An atomic scale-up attempt is recorded there before any
// node is created, so that a restarted provisioner finds it and either
// completes it or rolls it back: its ID (also the label of every node it
// creates), its plan and when it started.
const (
	// DetailScaleUpAttempt is the attempt in flight, "<request UID>-<n>";
	// the label of every node it creates (nodegroups.LabelAttempt).
	DetailScaleUpAttempt = "gantry.dev/scale-up-attempt"
	// DetailScaleUpPlan is the nodes it adds per group, "group=n,...".
	DetailScaleUpPlan = "gantry.dev/scale-up-plan"
	// DetailScaleUpStarted is when it started (RFC 3339).
	DetailScaleUpStarted = "gantry.dev/scale-up-started"
	// DetailAttempts counts the request's failed attempts (for backoff).
	DetailAttempts = "gantry.dev/attempts"
	// DetailNextAttempt is when the next attempt is due (RFC 3339).
	DetailNextAttempt = "gantry.dev/next-attempt"
	// DetailRebooks counts the rounds in which lost booked capacity was
	// booked again.
	DetailRebooks = "gantry.dev/rebooks"
)

// Metadata of a request and of its booking's Reservations. Reservations
// are cluster-scoped and cannot be owned by a namespaced request: the
// request's UID label ties them to it, and the request's finalizer removes
// them.
const (
	// Finalizer keeps a request until its booking is released.
	Finalizer = "autoscaling.gantry.dev/release-booking"
	// LabelRequestUID is on every Reservation of a request's booking.
	LabelRequestUID = "autoscaling.gantry.dev/provisioning-request-uid"
	// AnnotationRequest names the request, namespace/name, on its
	// Reservations.
	AnnotationRequest = "autoscaling.gantry.dev/provisioning-request"
	// AnnotationBookedPods is how many pods a Reservation books (absent: 1).
	AnnotationBookedPods = "autoscaling.gantry.dev/booked-pods"
	// AnnotationAttempts mirrors a request's count of failed attempts for
	// people to read; the count the provisioner uses is DetailAttempts.
	AnnotationAttempts = "autoscaling.gantry.dev/attempts"
)

// Annotations where provisioners before issue 14 kept a request's attempt.
// Any editor of the request can write them: they are neither read nor
// written any more (see the package doc and the Detail keys).
const (
	AnnotationScaleUpAttempt = "autoscaling.gantry.dev/scale-up-attempt"
	// AnnotationScaleUpPlan is the nodes to add per group, "group=n,...".
	AnnotationScaleUpPlan = "autoscaling.gantry.dev/scale-up-plan"
	// AnnotationScaleUpStarted is when the attempt started (RFC 3339).
	AnnotationScaleUpStarted = "autoscaling.gantry.dev/scale-up-started"
	// AnnotationNextAttempt is when the next attempt was due.
	AnnotationNextAttempt = "autoscaling.gantry.dev/next-attempt"
)

// ParameterPodGroup names a PodGroup of the request's namespace (gang
// scheduling) whose members may use the request's booking, as the pods
// that name the request in a consume annotation may: the gang's
// controller need not annotate them. Its members pending count as the
// request's pods in the quota check, and its members bound count as come.
const ParameterPodGroup = "podGroup"

// ParameterProcessorInstance names the provisioner instance meant to serve
// a check-capacity request (cluster-autoscaler 1.33 and later): see
// Reconciler.ProcessorInstance.
const ParameterProcessorInstance = "processorInstance"

// priorityReason is the reason a request fails with when its pods'
// priority is rejected.
func priorityReason(rej *priority.Rejection) string {
	if rej.Cause == priority.ClassForbidden {
		return ReasonPriorityClassForbidden
	}
	return ReasonPriorityClassNotFound
}
