//go:build soak

package soak

import (
	"flag"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

// Flags (after -- on the ginkgo command line).
var (
	durationFlag = flag.Duration("soak-duration", 30*time.Minute, "how long tenants work and faults are injected")
	seedFlag     = flag.Uint64("soak-seed", 0, "seed of the work and the fault schedule; 0 picks one (the report prints it)")
	faultsFlag   = flag.Duration("soak-fault-interval", 0, "mean time between two faults; 0: the shape's (1m on the local runtime, 45s on the stock shape, whose ten kinds of fault need more for three rounds in 30m)")
	tenantsFlag  = flag.Int("soak-tenants", 3, "tenants working at once")
)

func TestSoak(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry soak")
}

// Four kwok nodes, the general node group for atomic scale-ups, and Kueue.
var _ = framework.SetupSuite(framework.WithCluster("soak"), framework.WithKueue(), framework.WithFakeNodesOnly(), framework.WithNodes(4))
