//go:build scheduler_perf

package benchutil

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/klog/v2"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Main is the TestMain of every benchmark package, so that all of them run
// with the same logging and flags: scheduler_perf's (InitTests: klog at
// -v=2, as in production, and its -perf-scheduling-label-filter and
// -data-items-dir), and a logger for controller-runtime, which installing
// Gantry's CRDs logs through (without one it prints a warning with a stack
// trace to stderr, in the middle of a benchmark's result line).
func Main(m *testing.M) {
	ctrllog.SetLogger(klog.Background())
	if err := perf.InitTests(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
