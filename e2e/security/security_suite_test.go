// Package security runs the attacks of docs/security.md's threat model
// against a Gantry cluster, each as a tenant: a ServiceAccount bound to
// edit in its own namespace (framework.Tenant), and nothing more. Every
// spec asserts that the attack fails and that its victim (another
// tenant's pods, nodes or reservations, a namespace, a preemption outcome)
// is unchanged. Specs are labelled security; the findings they cover are
// named by their number in the security review, as docs/security.md's
// table does.
//
// The specs measure capacity, so they run one at a time (Serial) on a
// cluster of their own (two kwok nodes).
package security

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestSecurity(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry security suite")
}

// The provisioner's work budget and cap on bookings are set low enough for
// a tenant to reach them on two nodes; every other spec stays well inside.
var _ = framework.SetupSuite(framework.WithCluster("security"), framework.WithFakeNodesOnly(), framework.WithNodes(2),
	framework.WithProvisionerArgs("simulation-budget=500", "max-bookings-per-namespace=4"))
