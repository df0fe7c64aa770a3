// Package integration tests the scheduling.gantry.dev CRDs of crds/manifests
// (their schemas, defaults and CEL rules) and the typed clients of crds/client
// against kube-apiserver and etcd from the build output (`make integration`,
// build tag integration).
package integration
