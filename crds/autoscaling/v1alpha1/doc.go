// Package v1alpha1 is the autoscaling.gantry.dev/v1alpha1 API:
// ProvisioningClass, a cluster-scoped, admin-defined class of
// ProvisioningRequests (autoscaling.x-k8s.io/v1): which handler serves its
// requests and the defaults they get (validity window, booking duration,
// backoff, node groups).
//
// +kubebuilder:object:generate=true
// +k8s:deepcopy-gen=package
// +groupName=autoscaling.gantry.dev
// +groupGoName=Autoscaling
package v1alpha1
