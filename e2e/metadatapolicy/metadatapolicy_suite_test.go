// Package metadatapolicy holds the e2e specs of MetadataPolicy admission and
// the QoS annotator, in-process in Gantry's kube-apiserver.
package metadatapolicy

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestMetadataPolicy(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry MetadataPolicy suite")
}

var _ = framework.SetupSuite()
