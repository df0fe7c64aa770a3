// Package cost measures what reservations cost each process of a control
// plane, with kube-apiserver and etcd each in its own process (from
// _output/bin), as in production, where scheduler_perf runs kube-apiserver
// and the scheduler in one:
//
//   - BenchmarkReservationCost runs Gantry's kube-scheduler in this process
//     (scheduler/schedtest, client QPS 5000): 10,000 pods, half of them
//     owners, on 5000 nodes, without reservations and with 3000 Available
//     ones. It reports pods/s, the CPU time per pod of this process
//     (scheduler and harness), kube-apiserver and etcd, the reservation
//     status writes per pod, and how long after the last binding the last
//     consumed reservation showed Succeeded (status-lag-s). Its names
//     follow BenchmarkPerfScheduling's (suite/test case/workload), which
//     perfreport reads into docs/performance.md.
//   - BenchmarkReservationStatusWrite measures one reservation status
//     write alone, with no scheduler, by how it is sent (Update,
//     UpdateWithoutManagedFields, UpdateStatusOnly, MergePatch, and Delete
//     for comparison), against a pod status write (PodStatus): writes/s,
//     kube-apiserver's and etcd's CPU and kube-apiserver's allocations per
//     write.
//
// Run them with `make bench-scheduler WHAT=cost` (BenchmarkReservationCost;
// build tag scheduler_perf; knobs in hack/bench-scheduler.sh), and
// BenchmarkReservationStatusWrite with `make bench-scheduler WHAT=cost
// BENCH=BenchmarkReservationStatusWrite`. The scheduler's logs go to
// $ARTIFACTS/scheduler.log.
package cost
