package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=provclass
// +kubebuilder:printcolumn:name="Handler",type="string",JSONPath=".spec.handler"
// +kubebuilder:printcolumn:name="Valid for",type="integer",JSONPath=".spec.validUntilSeconds"
// +kubebuilder:printcolumn:name="Booking",type="string",JSONPath=".spec.bookingDuration"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ProvisioningClass is a class of ProvisioningRequests an administrator
// defines: a request whose provisioningClassName is the class's name is
// served by the class's handler with the class's defaults.
type ProvisioningClass struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:Required
	Spec ProvisioningClassSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// ProvisioningClassList is a list of ProvisioningClasses.
type ProvisioningClassList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProvisioningClass `json:"items"`
}

// Handler is how a class's requests are served.
// +kubebuilder:validation:Enum=check-capacity;atomic-scale-up
type Handler string

const (
	// HandlerCheckCapacity checks that the current cluster holds every pod
	// of the request, then books the capacity.
	HandlerCheckCapacity Handler = "check-capacity"
	// HandlerAtomicScaleUp adds every node the request needs in one step,
	// or none, then books the capacity.
	HandlerAtomicScaleUp Handler = "atomic-scale-up"
)

// ProvisioningClassSpec is the class's handler and its requests' defaults.
// +kubebuilder:validation:XValidation:rule="!has(self.nodeGroups) || self.handler == 'atomic-scale-up'",message="nodeGroups apply to the atomic-scale-up handler only"
// +kubebuilder:validation:XValidation:rule="!has(self.provisioningTimeout) || self.handler == 'atomic-scale-up'",message="provisioningTimeout applies to the atomic-scale-up handler only"
// +kubebuilder:validation:XValidation:rule="!has(self.backoff) || !has(self.backoff.initial) || !has(self.backoff.max) || duration(self.backoff.initial) <= duration(self.backoff.max)",message="backoff.initial must not exceed backoff.max"
type ProvisioningClassSpec struct {
	// Handler serves the class's requests.
	// +kubebuilder:validation:Required
	Handler Handler `json:"handler"`

	// ValidUntilSeconds is how long after its creation a request is
	// retried before it Fails, unless it sets the ValidUntilSeconds
	// parameter. Default 604800 (7 days, as cluster-autoscaler).
	// +kubebuilder:validation:Minimum=1
	// +optional
	ValidUntilSeconds *int32 `json:"validUntilSeconds,omitempty"`

	// BookingDuration is how long provisioned capacity stays booked for
	// the request's pods. Default 10m.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive"
	// +optional
	BookingDuration *metav1.Duration `json:"bookingDuration,omitempty"`

	// Backoff spaces the retries of a request.
	// +optional
	Backoff *Backoff `json:"backoff,omitempty"`

	// NodeGroups the handler may add nodes to (atomic-scale-up), in order
	// of preference: of two groups that need as many new nodes, a plan
	// takes the first. Empty: every node group of the provisioner.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	NodeGroups []string `json:"nodeGroups,omitempty"`

	// ProvisioningTimeout is how long the nodes of one scale-up attempt
	// have to become Ready before the attempt is rolled back
	// (atomic-scale-up). Default 5m.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive"
	// +optional
	ProvisioningTimeout *metav1.Duration `json:"provisioningTimeout,omitempty"`
}

// Backoff is an exponential backoff: initial, doubling, capped at max.
type Backoff struct {
	// Initial delay. Default 10s.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive"
	// +optional
	Initial *metav1.Duration `json:"initial,omitempty"`
	// Max delay. Default 5m.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be positive"
	// +optional
	Max *metav1.Duration `json:"max,omitempty"`
}
