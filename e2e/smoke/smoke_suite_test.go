// Package smoke holds the specs that prove the foundation works: the API
// server is Gantry's, Gantry's scheduler places pods on kwok nodes, and every
// Gantry CRD is served.
package smoke

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestSmoke(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry smoke suite")
}

var _ = framework.SetupSuite()
