package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EnforcementMode says whether a policy acts or only reports.
// +kubebuilder:validation:Enum=Enforce;Audit
type EnforcementMode string

const (
	// Enforce mutates and rejects objects.
	Enforce EnforcementMode = "Enforce"
	// Audit evaluates the policy and reports what would happen (audit
	// annotations and an event) without mutating or rejecting.
	Audit EnforcementMode = "Audit"
)

// Operation is an admission operation a policy applies to.
// +kubebuilder:validation:Enum=CREATE;UPDATE
type Operation string

const (
	// Create is object creation.
	Create Operation = "CREATE"
	// Update is object update.
	Update Operation = "UPDATE"
)

// MaxRules bounds the rules of one policy.
const MaxRules = 64

// MetadataPolicySpec is the policy: rules, what they apply to, and whether
// they are enforced.
type MetadataPolicySpec struct {
	// rules are evaluated against the object as submitted. If any matching
	// rule rejects, the object is rejected without mutation; otherwise every
	// matching rule's mutations apply.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Rules []MetadataPolicyRule `json:"rules"`

	// targets says which resources and operations the policy applies to.
	// Default: pods, on CREATE and UPDATE.
	// +optional
	Targets *Targets `json:"targets,omitempty"`

	// enforcement is Enforce (default) or Audit.
	// +kubebuilder:default=Enforce
	// +optional
	Enforcement EnforcementMode `json:"enforcement,omitempty"`
}

// Targets selects the requests a policy applies to.
type Targets struct {
	// resources the policy applies to. Default: pods (core group).
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Resources []GroupResource `json:"resources,omitempty"`

	// operations the policy applies to. Default: CREATE and UPDATE.
	// +kubebuilder:validation:MaxItems=2
	// +listType=set
	// +optional
	Operations []Operation `json:"operations,omitempty"`
}

// GroupResource names a resource: group "" is the core group.
type GroupResource struct {
	// group of the resource; "" for the core group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group"`
	// resource is the plural resource name, e.g. "pods" or "deployments".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self).hasValue()",message="must be a lowercase plural resource name (RFC 1123 label)"
	Resource string `json:"resource"`
}

// MetadataPolicyRule applies its action to objects its predicate selects.
type MetadataPolicyRule struct {
	// policyPredicate selects objects; empty selects every object.
	// +optional
	PolicyPredicate PolicyPredicate `json:"policyPredicate,omitempty"`
	// policyAction is what happens to a selected object.
	PolicyAction PolicyAction `json:"policyAction"`
}

// PolicyPredicate selects objects by their labels and annotations; both
// selectors must match. A nil selector matches everything.
type PolicyPredicate struct {
	// labelSelector is matched against the object's labels.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// annotationSelector is matched against the object's annotations, with
	// label selector semantics (so its values must be valid label values).
	// +optional
	AnnotationSelector *metav1.LabelSelector `json:"annotationSelector,omitempty"`
}

// PolicyAction rejects a selected object, or adds labels and annotations to
// it and, for pods at CREATE, sets its scheduler.
// +kubebuilder:validation:XValidation:rule="!(has(self.reject) && self.reject) || (!has(self.updatedLabels) && !has(self.updatedAnnotations) && !has(self.schedulerName))",message="reject cannot be combined with updatedLabels, updatedAnnotations or schedulerName in one action"
// +kubebuilder:validation:XValidation:rule="(has(self.reject) && self.reject) || has(self.updatedLabels) || has(self.updatedAnnotations) || has(self.schedulerName)",message="an action must reject, or set labels, annotations or schedulerName"
type PolicyAction struct {
	// reject rejects the object without mutating it.
	// +optional
	Reject bool `json:"reject,omitempty"`

	// updatedLabels are added to the object, replacing existing values. Keys
	// must be qualified names; the MetadataPolicy admission plugin checks
	// them when the policy is written (a CEL rule over map keys would exceed
	// the API server's cost budget).
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	UpdatedLabels map[string]LabelValue `json:"updatedLabels,omitempty"`

	// updatedAnnotations are added to the object, replacing existing values.
	// Keys must be qualified names, checked as for updatedLabels.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	UpdatedAnnotations map[string]AnnotationValue `json:"updatedAnnotations,omitempty"`

	// schedulerName sets spec.schedulerName of pods at CREATE. The field is
	// immutable afterwards, so it is ignored on UPDATE and for other
	// resources.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="must be a DNS subdomain, as scheduler names are"
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`
}

// LabelValue is a label value: at most 63 alphanumerics, '-', '_' or '.',
// starting and ending alphanumeric, or empty.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="!format.labelValue().validate(self).hasValue()",message="must be a valid label value: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
type LabelValue string

// AnnotationValue is an annotation value.
// +kubebuilder:validation:MaxLength=4096
type AnnotationValue string

// MetadataPolicyStatus reports whether a policy is in effect and whether it
// conflicts with others.
type MetadataPolicyStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (the policy is in effect) and Conflict (it writes a
	// key another policy writes with a different value).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons.
const (
	ConditionReady    = "Ready"
	ConditionConflict = "Conflict"

	ReasonInEffect         = "InEffect"
	ReasonAuditOnly        = "AuditOnly"
	ReasonNoConflict       = "NoConflict"
	ReasonConflictingWrite = "ConflictingWrite"
)

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mdp,categories=gantry
// +kubebuilder:printcolumn:name="Enforcement",type=string,JSONPath=`.spec.enforcement`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Conflict",type=string,JSONPath=`.status.conditions[?(@.type=="Conflict")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MetadataPolicy applies its rules to objects in its own namespace.
type MetadataPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MetadataPolicySpec   `json:"spec"`
	Status MetadataPolicyStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MetadataPolicyList is a list of MetadataPolicy.
type MetadataPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MetadataPolicy `json:"items"`
}

// ClusterMetadataPolicySpec is a MetadataPolicySpec for objects in the
// namespaces it selects.
type ClusterMetadataPolicySpec struct {
	MetadataPolicySpec `json:",inline"`

	// namespaceSelector selects the namespaces of the objects the policy
	// applies to; nil selects every namespace. System namespaces
	// (kube-system, kube-public, kube-node-lease) are excluded unless the
	// selector names them explicitly with an In requirement on
	// kubernetes.io/metadata.name. Cluster-scoped objects are never selected.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cmdp,categories=gantry
// +kubebuilder:printcolumn:name="Enforcement",type=string,JSONPath=`.spec.enforcement`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Conflict",type=string,JSONPath=`.status.conditions[?(@.type=="Conflict")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterMetadataPolicy applies its rules to objects in the namespaces it
// selects.
type ClusterMetadataPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterMetadataPolicySpec `json:"spec"`
	Status MetadataPolicyStatus      `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterMetadataPolicyList is a list of ClusterMetadataPolicy.
type ClusterMetadataPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterMetadataPolicy `json:"items"`
}
