// Package v1alpha1 is the scheduling.gantry.dev/v1alpha1 API: Reservation, a
// cluster-scoped claim on node capacity for a set of owner pods. Gantry's
// kube-scheduler schedules a pending Reservation like a pod and then keeps
// its capacity for its owners until it is consumed, expires or is deleted.
//
// +kubebuilder:object:generate=true
// +k8s:deepcopy-gen=package
// +groupName=scheduling.gantry.dev
package v1alpha1
