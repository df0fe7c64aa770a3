// Package integration tests the ProvisioningRequest (autoscaling.x-k8s.io)
// and ProvisioningClass (autoscaling.gantry.dev) CRDs on a real
// kube-apiserver: what they accept, reject, default and keep immutable, and
// that the ProvisioningRequest CRD applies over one that stored the
// deprecated v1beta1 and serves the same requests through both versions.
package integration
