// Package bench runs upstream's scheduler benchmark harness
// (k8s.io/kubernetes/test/integration/scheduler_perf) on Gantry's plugins:
// the same SchedulingBasic-shaped workloads under upstream's default profile
// and under Gantry's profile, with and without Available reservations, in
// one run, so that their throughputs can be compared. `make bench-scheduler`
// runs it (build tag scheduler_perf) and prints the table.
package bench
