// Package config holds the internal types of the arguments of Gantry's
// kube-scheduler plugins, registered in kube-scheduler's configuration
// group kubescheduler.config.k8s.io beside upstream's plugin args. Plugins
// receive these types: decoded from the versioned form (package v1),
// defaulted and converted by the scheduler's configuration scheme.
//
// +k8s:deepcopy-gen=package
package config
