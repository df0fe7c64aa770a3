// Package bench measures Jobs admitted through Kueue with gantry-provisioner
// as the ProvisioningRequest backend (BenchmarkKueueAdmission), on a local
// Gantry cluster with Kueue that it brings up (kind/pkg/cluster, as the e2e
// suites' WithKueue does) or on one given by -kubeconfig, and writes
// docs/performance-kueue.md from what that benchmark and the provisioner's
// decision throughput (autoscaler/provisioning/integration,
// BenchmarkCheckCapacityThroughput) recorded (TestWriteDoc).
//
// Everything but this file is behind the build tag kueue_bench, so that
// `go test ./...` and `make e2e` pass it by: `make bench-kueue` runs it.
//
// A Job's way to Admitted is timed from watch events of the benchmark's
// own informers (Jobs, Kueue's Workloads, ProvisioningRequests), not from
// condition timestamps, which have one-second resolution. Kueue's part is
// Job created → its request created, plus request Provisioned → workload
// Admitted; gantry-provisioner's part is request created → Provisioned (or
// Failed).
package bench
