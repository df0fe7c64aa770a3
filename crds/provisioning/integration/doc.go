// Package integration tests the ProvisioningRequest (autoscaling.x-k8s.io)
// and ProvisioningClass (autoscaling.gantry.dev) CRDs on a real
// kube-apiserver: what they accept, reject, default and keep immutable.
package integration
