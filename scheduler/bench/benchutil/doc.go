// Package benchutil is what the scheduler benchmarks under scheduler/bench
// (perf, qps, cost) share: a control plane whose clients are not rate
// limited and a way to fill it with pods (SetupUnthrottled, CreatePods,
// Pod), one parallel runner (InParallel), one percentile (Percentiles), one
// pod watch (WatchPods, and CountBoundPods on it), one profile capture
// (StartProfiles: this process's and kube-apiserver's CPU and allocations),
// the CPU time of this process and its children (ProcessCPU), the
// scheduler's counters (ReadCounters), what the scheduler's API calls were
// (CallsSince, PerPod), the reservations' phases and status lag
// (CountPhase, StatusLag), and the recorders that append a benchmark's
// side figures to $ARTIFACTS (AppendJSON, AppendLines; RecordCPU,
// WatchCounters, TracePods).
//
// The environment, which hack/bench-scheduler.sh sets from its knobs:
//
//   - ARTIFACTS: the directory the recorders append to; unset, they record
//     nothing.
//   - GANTRY_BENCH_PROFILE_DIR: where StartProfiles writes; unset, it does
//     nothing.
//   - GANTRY_BENCH_COUNTERS, GANTRY_BENCH_TRACE: set, WatchCounters and
//     TracePods record.
//
// It is test code: only the benchmarks import it. It links
// scheduler/schedtest and test/util, which hack/verify-imports.sh keeps out
// of every shipped binary.
package benchutil

import "os"

// The environment variables the package reads.
const (
	EnvArtifacts  = "ARTIFACTS"
	EnvProfileDir = "GANTRY_BENCH_PROFILE_DIR"
	EnvCounters   = "GANTRY_BENCH_COUNTERS"
	EnvTrace      = "GANTRY_BENCH_TRACE"
)

// Artifacts is $ARTIFACTS, the directory the recorders append to ("" when
// nothing is recorded).
func Artifacts() string { return os.Getenv(EnvArtifacts) }
