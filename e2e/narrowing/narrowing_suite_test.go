// Package narrowing holds the e2e specs of gated placement narrowing: a
// queue controller narrows gated pods' placement and ungates them in one
// update, Gantry's kube-apiserver accepts exactly the narrowings, and the
// scheduler then honours the narrowed affinity.
package narrowing

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/gantry-dev/gantry/e2e/framework"
)

func TestNarrowing(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Gantry gated placement narrowing suite")
}

var _ = framework.SetupSuite()
