// Package kueue holds the e2e specs that drive ProvisioningRequests through
// Kueue's own controller (sigs.k8s.io/kueue, pinned in hack/tools/kueue),
// installed into the suite's cluster as `make up KUEUE=1` installs it:
// Jobs queued in ClusterQueues whose ProvisioningRequest admission check
// gantry-provisioner serves. Every spec ends by checking that nothing it
// caused is left: no Reservation, no node of the provisioner's, and every
// request in a state Kueue understands.
//
// The specs measure capacity, so they run one at a time (Serial) on a
// cluster of their own.
package kueue

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestKueue(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry with Kueue suite")
}

var _ = framework.SetupSuite(framework.WithCluster("kueue"), framework.WithKueue(), framework.WithFakeNodesOnly(), framework.WithNodes(3))
