// Package bench holds Gantry's scheduler benchmarks, one package per
// harness over one shared helper package, as upstream's scheduler_perf keeps
// its util.go apart from its per-area workloads:
//
//   - perf: upstream's scheduler_perf harness on Gantry's plugins
//     (BenchmarkPerfScheduling), upstream's profile against Gantry's, with
//     and without reservations;
//   - qps: preemption at the scheduler's own client rate limits
//     (BenchmarkPreemptionClientQPS, BenchmarkPreemptionVictimDeleteFaults);
//   - cost: what reservations cost each control-plane process
//     (BenchmarkReservationCost, BenchmarkReservationStatusWrite);
//   - benchutil: what they share (control plane, pods, watches, profiles,
//     percentiles, recorders).
//
// The benchmarks build with the tag scheduler_perf and run with `make
// bench-scheduler WHAT=perf|qps|cost|all` (hack/bench-scheduler.sh, which
// documents every knob); `make bench-scheduler WHAT=all DOC=1` regenerates
// docs/performance.md. testdata/gantry-scheduler-config.yaml is Gantry's
// profile for scheduler_perf, generated from scheduler/profiles.
package bench
