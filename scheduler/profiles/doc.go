// Package profiles holds Gantry's kube-scheduler profile, written once
// (gantry.yaml, embedded), and renders from it every configuration that
// runs it: the local cluster's KubeSchedulerConfiguration, scheduler_perf's,
// and the profile the integration tests and benchmarks start Gantry's
// scheduler with (schedtest.GantryProfile).
//
// The files other programs read (kube-scheduler and gantry-provisioner of
// the local cluster, scheduler_perf) are generated: Generated lists them,
// and this package's test fails when one differs from what gantry.yaml
// gives; `go test ./scheduler/profiles -update` rewrites them. A user's
// own --scheduler-config is not affected.
package profiles
