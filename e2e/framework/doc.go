// Package framework is the shared ground of Gantry's ginkgo e2e suites:
// cluster bring-up (or an existing cluster from --kubeconfig/KUBECONFIG),
// clients, a namespace per spec, bounded waits, and artifact collection when
// a spec fails (component logs and the objects under test, under
// --artifacts).
//
// A suite calls SetupSuite once at the top level of its suite file; specs
// call NewFramework in their Describe to get a namespace and clients.
package framework
