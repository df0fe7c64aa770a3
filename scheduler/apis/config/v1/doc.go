// Package v1 is the versioned form, in kubescheduler.config.k8s.io/v1, of
// the arguments of Gantry's kube-scheduler plugins: what a
// KubeSchedulerConfiguration's pluginConfig holds. The kind of a plugin's
// args is its name followed by Args, as upstream's.
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/gantry-dev/gantry/scheduler/apis/config
// +k8s:defaulter-gen=TypeMeta
// +groupName=kubescheduler.config.k8s.io
package v1
