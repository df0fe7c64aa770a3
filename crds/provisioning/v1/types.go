package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=provreq;provreqs
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ProvisioningRequest asks for capacity for groups of pods, all or nothing:
// a class either checks that the cluster holds them (check-capacity) or
// adds the nodes they need in one step (atomic scale-up), and then books
// the capacity for the pods that consume the request.
type ProvisioningRequest struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the request; it cannot be changed once created (delete and
	// create another to ask for something else).
	// +kubebuilder:validation:Required
	Spec ProvisioningRequestSpec `json:"spec"`

	// Status is written by the controller that serves the request's class.
	// +optional
	Status ProvisioningRequestStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ProvisioningRequestList is a list of ProvisioningRequests.
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata"`
	// +optional
	Items []ProvisioningRequest `json:"items"`
}

// ProvisioningRequestSpec describes the pods capacity is asked for. Nothing
// in it changes after creation: each field's rule refuses a change of its
// value, and the rule below refuses adding or removing parameters.
// +kubebuilder:validation:XValidation:rule="has(self.parameters) == has(oldSelf.parameters)",message="parameters cannot be added or removed after creation",fieldPath=".parameters"
type ProvisioningRequestSpec struct {
	// PodSets are the groups of pods, each a PodTemplate of the request's
	// namespace and a count.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	PodSets []PodSet `json:"podSets"`

	// ProvisioningClassName selects how the request is served:
	// check-capacity.autoscaling.x-k8s.io (or check-capacity.kubernetes.io),
	// best-effort-atomic-scale-up.autoscaling.x-k8s.io (or
	// atomic-scale-up.kubernetes.io), or the name of a ProvisioningClass
	// (autoscaling.gantry.dev). Requests of other classes are left to
	// whichever controller serves them.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	ProvisioningClassName string `json:"provisioningClassName"`

	// Parameters tune the class, e.g. ValidUntilSeconds (how long, from
	// creation, the request is retried) and noRetry ("true": fail at once
	// when capacity is not found).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:MaxProperties=100
	Parameters map[string]Parameter `json:"parameters"`
}

// Parameter is a class parameter's value.
// +kubebuilder:validation:MaxLength=255
type Parameter string

// PodSet is count pods shaped like a PodTemplate.
type PodSet struct {
	// PodTemplateRef names a PodTemplate in the request's namespace. The
	// pods that consume the request should match it in everything the
	// scheduler reads (requests, node selector, affinity, tolerations).
	// +kubebuilder:validation:Required
	PodTemplateRef Reference `json:"podTemplateRef"`

	// Count is how many such pods.
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
}

// Reference names an object in the same namespace.
type Reference struct {
	// Name of the object.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}

// ProvisioningRequestStatus is what the serving controller observed and did.
type ProvisioningRequestStatus struct {
	// Conditions: Accepted, Provisioned, Failed, BookingExpired,
	// CapacityRevoked.
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions"`

	// ProvisioningClassDetails are further values the class reports.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ProvisioningClassDetails map[string]Detail `json:"provisioningClassDetails"`
}

// Detail is a class detail's value.
// +kubebuilder:validation:MaxLength=32768
type Detail string

// Condition types.
const (
	// ConditionAccepted: the request's class is served and its pod sets
	// resolved (False with PodTemplateNotFound while a template is missing).
	ConditionAccepted = "Accepted"
	// ConditionProvisioned: the capacity exists (found or created) and is booked.
	ConditionProvisioned = "Provisioned"
	// ConditionFailed: the request will not be provisioned.
	ConditionFailed = "Failed"
	// ConditionBookingExpired: the booking ended before every pod consumed it.
	ConditionBookingExpired = "BookingExpired"
	// ConditionCapacityRevoked: booked capacity went away (a node disappeared).
	ConditionCapacityRevoked = "CapacityRevoked"
)

// Condition reasons that upstream also uses.
const (
	ReasonCapacityIsFound       = "CapacityIsFound"
	ReasonCapacityIsProvisioned = "CapacityIsProvisioned"
	ReasonCapacityIsNotFound    = "CapacityIsNotFound"
)

// Class names upstream defines, current and original.
const (
	ClassCheckCapacity              = "check-capacity.autoscaling.x-k8s.io"
	ClassBestEffortAtomicScaleUp    = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
	ClassCheckCapacityLegacy        = "check-capacity.kubernetes.io"
	ClassAtomicScaleUpLegacy        = "atomic-scale-up.kubernetes.io"
	ParameterValidUntilSeconds      = "ValidUntilSeconds"
	ParameterNoRetry                = "noRetry"
	AnnotationConsume               = "autoscaling.x-k8s.io/consume-provisioning-request"
	AnnotationConsumeLegacy         = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
	AnnotationProvisioningClassName = "autoscaling.x-k8s.io/provisioning-class-name"
)
