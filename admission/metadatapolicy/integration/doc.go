// Package integration tests the MetadataPolicy admission plugin inside
// Gantry's kube-apiserver (from _output/bin) against real etcd: the
// admission boundaries of the security review (findings 11, 12 and 14).
// Build tag integration.
package integration
