// Package util is what unit, integration and e2e tests share for waiting:
// one set of intervals and timeouts (constants.go), Poll, and waits for
// the objects tests wait on (WaitForPod, WaitForReservation,
// WaitForProvisioningRequestCondition).
//
// Every wait returns the last state it saw and an error; the error names
// what was waited for, for how long, and that last state, so a failure
// reads without opening the test. Two adapters turn the error into a
// failure at the caller's line: Must(t) for tests written with package
// testing (unit and integration tests), and package
// github.com/gantry-dev/gantry/test/util/gomega for ginkgo suites (e2e
// only: this package stays free of gomega).
package util
