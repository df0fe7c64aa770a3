// Package install tests the day-2 operations of Gantry's managed install
// (config/overlays/managed, as `gantry-cluster up --runtime kind
// --control-plane stock` applies it): applying it again changes nothing, a
// rolling update of each Deployment under load loses no admission request,
// booking or reservation, and deleting it removes everything it made.
package install

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestInstall(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry install suite (day-2 operations)")
}

var _ = framework.SetupSuite(framework.WithCluster("install"), framework.WithNodes(3))
