// Package gomega adapts the waits of package
// github.com/gantry-dev/gantry/test/util to ginkgo suites: a wait's error
// fails the spec at the line of the first caller not marked
// ginkgo.GinkgoHelper. Only e2e suites import it: unit and integration
// tests use util.Must and package testing.
package gomega

import (
	"context"

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

// ExpectNoError fails the spec if err is not nil; call it on util.Poll.
func ExpectNoError(err error, explain ...any) {
	ginkgo.GinkgoHelper()
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), explain...)
}

// Condition is cond as a function gomega.Eventually can poll: it fails
// with cond's error, or "not yet", until cond holds.
//
//	gomega.Eventually(ctx, utilgomega.Condition(cond)).Should(gomega.Succeed())
func Condition(cond func(ctx context.Context) (bool, error)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		done, err := cond(ctx)
		switch {
		case done:
			return nil
		case err != nil:
			return err
		default:
			return errNotYet
		}
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
