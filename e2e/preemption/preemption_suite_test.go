// Package preemption holds the e2e specs of Gantry's AsyncPreemption
// PostFilter plugin, which replaces upstream's DefaultPreemption in both
// profiles of Gantry's kube-scheduler: victims are chosen as upstream
// chooses them (priorities, PodDisruptionBudgets, preemptionPolicy), and
// the API work (DisruptionTarget condition, then delete) runs off the
// scheduling cycle, after which the preemptor is re-activated at once.
//
// The specs fill nodes to the last CPU and count the scheduler's
// preemption metrics, so they run one at a time (Serial) on a cluster of
// their own (three 4-CPU kwok nodes), and each starts from an empty cluster.
package preemption

import (
	"context"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestPreemption(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry preemption suite")
}

// Its own cluster: the specs read kube-scheduler's counters, which pods of
// anyone else sharing the cluster would move, and raise its log verbosity.
var _ = framework.SetupSuite(framework.WithCluster("preemption"), framework.WithFakeNodesOnly(), framework.WithNodes(3), framework.WithSetup(verboseScheduler))

// verboseScheduler raises kube-scheduler's log verbosity to 2 for the
// suite, so that its log shows each preemption (node, victims, result) when
// a spec fails.
func verboseScheduler(ctx context.Context) error {
	if framework.TestContext.Local == nil {
		return nil
	}
	if _, err := framework.SchedulerPut(ctx, "/debug/flags/v", "2"); err != nil {
		return err
	}
	if !framework.TestContext.OwnCluster {
		// A cluster that outlives the suite gets its default back. (The
		// suite's own cluster is gone by the time cleanups run.)
		ginkgo.DeferCleanup(func(ctx context.Context) error {
			_, err := framework.SchedulerPut(ctx, "/debug/flags/v", "0")
			return err
		})
	}
	return nil
}
