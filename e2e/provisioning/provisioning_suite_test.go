// Package provisioning holds the e2e specs of gantry-provisioner, which
// serves ProvisioningRequests (autoscaling.x-k8s.io/v1) of check-capacity
// classes on the local cluster: capacity found and booked with Reservations
// that keep other pods off and let the request's pods in, capacity not
// found, quota exceeded, a deleted request's booking released, and the
// Kueue-style flow of gated pods narrowed to the booked nodes.
//
// The specs measure capacity, so they run one at a time (Serial) on a
// cluster of their own (two kwok nodes).
package provisioning

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestProvisioning(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry provisioning suite")
}

var _ = framework.SetupSuite(framework.WithCluster("provisioning"), framework.WithFakeNodesOnly(), framework.WithNodes(2))
