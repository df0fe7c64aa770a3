// Package metadatapolicy runs the MetadataPolicy and QoS annotator e2e specs
// against the plugins in Gantry's kube-apiserver.
package metadatapolicy

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/e2e/metadatapolicy/specs"
)

func TestMetadataPolicy(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry MetadataPolicy suite (in-process)")
}

var (
	_ = framework.SetupSuite()
	_ = specs.Register(framework.LabelInProcess)
)
