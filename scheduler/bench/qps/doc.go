// Package qps measures preemption under the scheduler's own client rate
// limits. scheduler_perf gives its scheduler a client of QPS 5000 and no
// way to change it, so these benchmarks run the real kube-scheduler
// command in this process (scheduler/schedtest: its configuration file,
// clientConnection qps/burst honoured) against etcd and kube-apiserver from
// _output/bin, with upstream's default profile (DefaultPreemption) and with
// Gantry's (AsyncPreemption):
//
//   - BenchmarkPreemptionClientQPS: 500 nodes full of low-priority pods,
//     500 high-priority pods that must each preempt one, at QPS 5000
//     (scheduler_perf's) and at kube-scheduler's defaults (QPS 50, burst
//     100). It reports pods/s and the scheduler's API calls per preemptor.
//   - BenchmarkPreemptionVictimDeleteFaults: the same shape with 50
//     preemptors at QPS 50, every victim delete failing for the first 10s;
//     it reports the time from a preemptor's first attempt to its binding,
//     and what that exceeds its backoff by.
//
// Run them with `make bench-scheduler WHAT=qps` (build tag scheduler_perf;
// knobs in hack/bench-scheduler.sh); the schedulers' logs go to
// $ARTIFACTS/scheduler.log.
package qps
