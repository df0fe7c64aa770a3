// Package v1 is the autoscaling.x-k8s.io/v1 API: ProvisioningRequest, a
// namespaced request for capacity for a group of pods, as cluster-autoscaler
// defines it. The schema is the upstream one (same group, version, fields,
// validation), so clients written for upstream, such as Kueue, work
// unchanged; gantry-provisioner processes the requests of the classes it
// serves and leaves the others alone.
//
// +kubebuilder:object:generate=true
// +k8s:deepcopy-gen=package
// +groupName=autoscaling.x-k8s.io
// +groupGoName=AutoscalingX
package v1
