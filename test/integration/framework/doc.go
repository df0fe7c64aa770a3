// Package framework starts etcd and Gantry's kube-apiserver from the build
// output (<repo>/_output/bin, `make build`) as local processes, for
// integration tests: real API semantics (validation, admission, storage)
// without a scheduler, nodes or a cluster program. Each test gets its own
// processes, ports, data and certificates, removed when it ends; if it
// failed, the end of both processes' logs is printed first.
//
// Start gives a bare control plane; StartWithCRDs also installs every CRD
// of crds/manifests and waits until they are served; InstallCRDs installs
// others (capitest's Cluster API CRDs). ControlPlane carries an admin REST
// config and the Kubernetes and Gantry clientsets. scheduler/schedtest and
// crds/crdtest build on it.
//
// It is a thin layer over controller-runtime's envtest
// (sigs.k8s.io/controller-runtime/pkg/envtest), which starts the processes,
// picks free ports, makes the serving and client certificates, provisions
// the admin user and installs CRDs. What this package adds:
//   - the binaries are Gantry's, by explicit path, so KUBEBUILDER_ASSETS
//     can never swap in a stock kube-apiserver without Gantry's patches;
//   - the processes' logs go to files in the test's directory, and their
//     tails are shown when the test fails (envtest would either discard
//     them or stream everything);
//   - the admin authenticates with a client certificate (group
//     system:masters); a proxy in front of kube-apiserver (schedtest's
//     Faults) presents it on its clients' behalf, and impersonation (the
//     provisioner's ServiceAccount) works from it;
//   - waits use test/util's timeouts, so a slow machine is handled in one
//     place.
package framework
