package util

import "time"

// Intervals and timeouts of every wait in Gantry's tests. A test picks the
// one that says how much work it waits for, never a number of its own:
// when a machine is slow, one change here makes every test patient.
const (
	// Interval is how often a wait checks.
	Interval = 100 * time.Millisecond
	// SlowInterval is how often a wait checks when each check lists many
	// objects while a benchmark measures: checking must not load the
	// apiserver being measured.
	SlowInterval = time.Second

	// Timeout is for one step of a controller or the scheduler: a pod
	// scheduled, a nomination set or cleared, a condition written, a
	// finalizer released.
	Timeout = 30 * time.Second
	// LongTimeout is for a chain of steps: a preemption with retries, a
	// scale-up whose nodes must come up, a scheduler cache that must agree
	// with the API, anything on a whole e2e cluster.
	LongTimeout = 2 * time.Minute
	// BenchmarkTimeout is for a benchmark's whole workload.
	BenchmarkTimeout = 10 * time.Minute

	// StartupTimeout is how long one control-plane process (etcd,
	// kube-apiserver) may take to serve.
	StartupTimeout = 90 * time.Second
	// StopTimeout is how long one control-plane process may take to stop
	// before it is killed.
	StopTimeout = 15 * time.Second

	// ConsistentDuration is how long a test watches for something that
	// must not happen (a pod that must stay pending) after what would
	// have caused it.
	ConsistentDuration = 2 * time.Second
)
