// Package reservation holds the e2e specs of Gantry's Reservations
// (scheduling.gantry.dev/v1alpha1): capacity that Gantry's kube-scheduler
// places like a pod and holds for owner pods, on a cluster that fills up,
// across expiry, deletion and scheduler restarts, as the API and the
// scheduler's own endpoints and log show it.
//
// The specs measure capacity, so they run one at a time (Serial) on a
// cluster of their own (three 4-CPU kwok nodes), and each starts from an
// empty cluster.
package reservation

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestReservation(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry reservation suite")
}

// Its own cluster: the specs restart kube-scheduler, which must not disturb
// a cluster someone else is using.
var _ = framework.SetupSuite(framework.WithCluster("reservation"), framework.WithFakeNodesOnly(), framework.WithNodes(3))
