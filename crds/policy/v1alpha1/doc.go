// Package v1alpha1 is the policy.gantry.dev/v1alpha1 API: MetadataPolicy
// (namespaced) and ClusterMetadataPolicy (cluster-scoped), declarative rules
// that, by label and annotation predicates, add labels and annotations,
// reject objects, or choose a pod's scheduler.
//
// +kubebuilder:object:generate=true
// +groupName=policy.gantry.dev
package v1alpha1
