// Package perf runs upstream's scheduler benchmark harness
// (k8s.io/kubernetes/test/integration/scheduler_perf) on Gantry's plugins:
// BenchmarkPerfScheduling runs the workloads of
// testdata/performance-config.yaml, upstream's thresholded shapes, and
// its gang shapes (PodGroups, gate GenericWorkload), under upstream's
// default profile and under Gantry's
// (../testdata/gantry-scheduler-config.yaml, generated from
// scheduler/profiles), with and without Available reservations, in one run,
// so that their throughputs can be compared; docs/performance.md is made
// from its output.
//
// Kube-apiserver, etcd's client and the scheduler share this process. Each
// workload gets a scheduler of its own, and with it a fresh extension layer;
// a workload named _<N>Reservations gets N reservations for its app=owner
// pods of namespace "owners" once its nodes are in place, and records how
// many owners were bound into one, and their latency, in
// $ARTIFACTS/reservations.jsonl. Every workload also records its CPU use
// (cpu.jsonl), and on request its counters, pod trace and profiles
// (benchutil).
//
// Run it with `make bench-scheduler WHAT=perf` (build tag scheduler_perf;
// knobs in hack/bench-scheduler.sh), e.g. LABELS=gantry-short for the quick
// variants, LABELS=gantry-gang for the gangs (gantry-gang-short, quick).
package perf
