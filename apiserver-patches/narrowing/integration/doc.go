// Package integration tests gated placement narrowing against Gantry's
// patched kube-apiserver and etcd from the build output (`make integration`,
// build tag integration), including updates of adversarial size (2000
// terms) that must get a quick 422 with a small message.
package integration
