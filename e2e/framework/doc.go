// Package framework is the shared ground of Gantry's ginkgo e2e suites:
// cluster bring-up (or an existing cluster from --kubeconfig/KUBECONFIG),
// clients, a namespace per spec, and artifact collection when a spec fails
// (component logs and the objects under test, under --artifacts).
//
// A suite calls SetupSuite once at the top level of its suite file; specs
// call NewFramework in their Describe to get a namespace and clients.
//
// It also holds what more than one suite does, as gomega assertions that
// fail at the spec's line: creating and waiting for pods (pods.go) and
// reservations (reservations.go), starting from idle kwok nodes and
// ending a spec that filled them (nodes.go), and kube-scheduler's REST
// views, metrics, log and restarts (scheduler.go, metrics.go). Waits use
// the intervals and timeouts of github.com/gantry-dev/gantry/test/util, and
// its waits where one fits; objects are built with
// github.com/gantry-dev/gantry/test/wrappers.
package framework
