package v1alpha1

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReservationPhase is where a Reservation is in its life.
// +kubebuilder:validation:Enum=Pending;Available;Succeeded;Failed
type ReservationPhase string

const (
	// ReservationPending: not yet placed on a node (new, or unschedulable so far).
	ReservationPending ReservationPhase = "Pending"
	// ReservationAvailable: placed; its capacity is held for its owners.
	ReservationAvailable ReservationPhase = "Available"
	// ReservationSucceeded: consumed by an owner (allocateOnce); terminal.
	ReservationSucceeded ReservationPhase = "Succeeded"
	// ReservationFailed: expired, its node went away, or it was preempted; terminal.
	ReservationFailed ReservationPhase = "Failed"
)

// Condition types and reasons of a Reservation.
const (
	// ConditionScheduled is True once the reservation has a node.
	ConditionScheduled = "Scheduled"
	// ConditionReady is True while the reservation's capacity can be used by its owners.
	ConditionReady = "Ready"

	ReasonUnschedulable = "Unschedulable"
	ReasonScheduled     = "Scheduled"
	ReasonAvailable     = "Available"
	ReasonAllocated     = "Allocated"
	ReasonExpired       = "Expired"
	ReasonNodeDeleted   = "NodeDeleted"
	ReasonPreempted     = "Preempted"
)

// AnnotationAllocated is set on an owner pod when the scheduler places it in
// a reservation: the JSON of a ReservationAllocation. It is the durable record
// of the allocation, from which the scheduler rebuilds its accounting.
const AnnotationAllocated = "scheduling.gantry.dev/reservation-allocated"

// ReservationAllocation is the value of AnnotationAllocated.
type ReservationAllocation struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
	// Priority is the reservation's priority: as a preemption victim, the
	// pod is protected as its reservation was, if that is more.
	Priority int32 `json:"priority,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rsv
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Reservation holds node capacity for a set of owner pods. It is scheduled
// like a pod of its template; once Available, only its owners may use the
// capacity it holds.
type Reservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ReservationSpec `json:"spec"`
	// +optional
	Status ReservationStatus `json:"status,omitempty"`
}

// ReservationSpec is what is reserved, for whom and for how long.
// +kubebuilder:validation:XValidation:rule="!(has(self.ttl) && has(self.expires))",message="set at most one of ttl and expires"
type ReservationSpec struct {
	// Template is the shape of the pod whose capacity is reserved. It is
	// immutable: to reserve something else, create another Reservation.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="template is immutable"
	Template ReservationTemplate `json:"template"`

	// Owners are the pods that may use the reservation: a pod matching any
	// entry is an owner.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Owners []ReservationOwner `json:"owners"`

	// TTL is how long the reservation lives after creation; when it passes,
	// the reservation becomes Failed (reason Expired) and its capacity is released.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// Expires is the time at which the reservation expires, as TTL.
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`

	// AllocateOnce, when true (the default), makes the reservation Succeeded
	// as soon as one owner pod is placed in it; what that pod did not use is
	// released. When false, owners may share it until it expires.
	// +kubebuilder:default=true
	// +optional
	AllocateOnce *bool `json:"allocateOnce,omitempty"`
}

// ReservationTemplate is the part of a pod that decides where it can run and
// what it holds there. A priority above 1000000000 (the system priorities,
// which kube-apiserver gives pods only through the system PriorityClasses)
// may not preempt: with it the reservation would preempt system pods.
// +kubebuilder:validation:XValidation:rule="!has(self.priority) || self.priority <= 1000000000 || (has(self.preemptionPolicy) && self.preemptionPolicy == 'Never')",message="priority above 1000000000 (a system priority) needs preemptionPolicy Never"
type ReservationTemplate struct {
	// Requests are the resources reserved, as a pod's summed container requests.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, type(self[k]) == string ? !quantity(self[k]).isLessThan(quantity('0')) : int(self[k]) >= 0)",message="requests must not be negative"
	Requests v1.ResourceList `json:"requests"`

	// NodeName pins the reservation to one node (it still has to fit there).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// NodeSelector, as a pod's.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Affinity, as a pod's.
	// +optional
	Affinity *v1.Affinity `json:"affinity,omitempty"`

	// Tolerations, as a pod's.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []v1.Toleration `json:"tolerations,omitempty"`

	// HostPorts are host ports the reservation holds, as a container's ports.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	HostPorts []v1.ContainerPort `json:"hostPorts,omitempty"`

	// Priority of the reservation in the scheduling queue and against
	// preemption. Above 1000000000 (a system priority) only with
	// preemptionPolicy Never.
	// +optional
	Priority *int32 `json:"priority,omitempty"`

	// PreemptionPolicy, as a pod's: whether the pending reservation may
	// preempt pods (and Available reservations) of lower priority to be
	// placed. Default PreemptLowerPriority; the profile must run Gantry's
	// AsyncPreemption, which knows reservations, else it never preempts.
	// +kubebuilder:validation:Enum=PreemptLowerPriority;Never
	// +optional
	PreemptionPolicy *v1.PreemptionPolicy `json:"preemptionPolicy,omitempty"`

	// SchedulerName is the scheduler profile that places the reservation; it
	// must enable the Reservation plugin.
	// +kubebuilder:default=default-scheduler
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`
}

// ReservationOwner selects owner pods by exactly one of its fields.
// +kubebuilder:validation:XValidation:rule="(has(self.object) ? 1 : 0) + (has(self.controller) ? 1 : 0) + (has(self.labelSelector) ? 1 : 0) + (has(self.annotation) ? 1 : 0) + (has(self.podGroup) ? 1 : 0) == 1",message="set exactly one of object, controller, labelSelector, annotation and podGroup"
// +kubebuilder:validation:XValidation:rule="!(has(self.labelSelector) || has(self.annotation) || has(self.podGroup)) || (has(self.namespace) && size(self.namespace) > 0)",message="labelSelector, annotation and podGroup need a namespace"
type ReservationOwner struct {
	// Object is one pod, by namespace and name (and UID, if set).
	// +optional
	Object *OwnerReference `json:"object,omitempty"`

	// Controller selects the pods whose controller reference (kind, name and,
	// if set, UID) is this one, in its namespace.
	// +optional
	Controller *OwnerReference `json:"controller,omitempty"`

	// LabelSelector selects pods of Namespace by label.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// Annotation selects the pods of Namespace that carry this annotation
	// with this value (e.g. the pods consuming a ProvisioningRequest).
	// +optional
	Annotation *OwnerAnnotation `json:"annotation,omitempty"`

	// PodGroup selects the pods of Namespace whose spec.schedulingGroup
	// names this PodGroup (scheduling.k8s.io, gang scheduling): a gang's
	// members, however their controller made them.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	PodGroup string `json:"podGroup,omitempty"`

	// Namespace of the pods LabelSelector, Annotation or PodGroup selects.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// OwnerAnnotation is an annotation a pod carries.
type OwnerAnnotation struct {
	// Key of the annotation.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key"`
	// Value it has.
	// +kubebuilder:validation:MaxLength=253
	Value string `json:"value"`
}

// OwnerReference names a pod, or a pod's controller.
type OwnerReference struct {
	// APIVersion of a controller, e.g. apps/v1; ignored for object owners.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// Kind of a controller, e.g. ReplicaSet; required for controller owners.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=36
	// +optional
	UID types.UID `json:"uid,omitempty"`
}

// ReservationStatus is written by Gantry's kube-scheduler.
type ReservationStatus struct {
	// +optional
	Phase ReservationPhase `json:"phase,omitempty"`
	// NodeName is where the reservation was placed.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Allocatable is what the reservation holds (its template's requests).
	// +optional
	Allocatable v1.ResourceList `json:"allocatable,omitempty"`
	// Allocated is the sum of the requests of the owner pods placed in it.
	// +optional
	Allocated v1.ResourceList `json:"allocated,omitempty"`
	// CurrentOwners are the owner pods placed in it.
	// +listType=atomic
	// +optional
	CurrentOwners []v1.ObjectReference `json:"currentOwners,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// ReservationList is a list of Reservations.
type ReservationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Reservation `json:"items"`
}
