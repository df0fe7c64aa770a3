// Package integration tests gated placement narrowing against Gantry's
// patched kube-apiserver and etcd from the build output (`make integration`,
// build tag integration).
package integration
