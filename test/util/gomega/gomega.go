// Package gomega adapts the waits of package
// github.com/gantry-dev/gantry/test/util to ginkgo suites: a wait's error
// fails the spec at the line of the first caller not marked
// ginkgo.GinkgoHelper. Only e2e suites import it: unit and integration
// tests use util.Must and package testing.
package gomega

import (
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// Must returns v, failing the spec if err is not nil; call it on a wait:
//
//	pr := utilgomega.Must(util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, ...))
func Must[T any](v T, err error) T {
	ginkgo.GinkgoHelper()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return v
}
