package util

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// Waiter adapts the waits to package testing: each method is the function
// of the same name, failing the test (t.Fatal, at the caller's line)
// instead of returning an error.
type Waiter struct{ t testing.TB }

// Must is the waits for a test, a benchmark or a fuzz target:
//
//	pod := util.Must(t).WaitForPod(ctx, util.Timeout, client, "default", "p", "scheduled", util.PodScheduled)
func Must(t testing.TB) Waiter { return Waiter{t: t} }

// Poll is Poll, failing the test on a timeout.
func (w Waiter) Poll(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	w.t.Helper()
	w.check(Poll(ctx, timeout, what, cond))
}

// Until is Poll for a condition that cannot fail: it waits until cond
// holds, and returns how long that took.
func (w Waiter) Until(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) bool) time.Duration {
	w.t.Helper()
	start := time.Now()
	w.Poll(ctx, timeout, what, func(ctx context.Context) (bool, error) { return cond(ctx), nil })
	return time.Since(start)
}

// WaitForPod is WaitForPod, failing the test on a timeout.
func (w Waiter) WaitForPod(ctx context.Context, timeout time.Duration, c kubernetes.Interface, ns, name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	w.t.Helper()
	pod, err := WaitForPod(ctx, timeout, c, ns, name, what, cond)
	w.check(err)
	return pod
}

// WaitForReservation is WaitForReservation, failing the test on a timeout.
func (w Waiter) WaitForReservation(ctx context.Context, timeout time.Duration, c gantryclient.Interface, name, what string,
	cond func(*schedv1alpha1.Reservation) bool) *schedv1alpha1.Reservation {
	w.t.Helper()
	r, err := WaitForReservation(ctx, timeout, c, name, what, cond)
	w.check(err)
	return r
}

// WaitForProvisioningRequestCondition is
// WaitForProvisioningRequestCondition, failing the test on a timeout.
func (w Waiter) WaitForProvisioningRequestCondition(ctx context.Context, timeout time.Duration, c gantryclient.Interface,
	ns, name, condType string, status metav1.ConditionStatus, reason string) *provv1.ProvisioningRequest {
	w.t.Helper()
	pr, err := WaitForProvisioningRequestCondition(ctx, timeout, c, ns, name, condType, status, reason)
	w.check(err)
	return pr
}

func (w Waiter) check(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}
