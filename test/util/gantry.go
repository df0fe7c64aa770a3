package util

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// WaitForProvisioningRequestCondition waits until the ProvisioningRequest
// ns/name has condition condType with status and, unless reason is "",
// reason, and returns the last request read. The integration tests and the
// e2e suite wait on requests through it alone.
func WaitForProvisioningRequestCondition(ctx context.Context, timeout time.Duration, c gantryclient.Interface,
	ns, name, condType string, status metav1.ConditionStatus, reason string) (*provv1.ProvisioningRequest, error) {
	want := fmt.Sprintf("%s=%s", condType, status)
	if reason != "" {
		want += " (" + reason + ")"
	}
	return WaitFor(ctx, timeout, fmt.Sprintf("ProvisioningRequest %s/%s %s", ns, name, want),
		func(ctx context.Context) (*provv1.ProvisioningRequest, error) {
			return c.AutoscalingXV1().ProvisioningRequests(ns).Get(ctx, name, metav1.GetOptions{})
		},
		func(pr *provv1.ProvisioningRequest) bool {
			cond := meta.FindStatusCondition(pr.Status.Conditions, condType)
			return cond != nil && cond.Status == status && (reason == "" || cond.Reason == reason)
		},
		DescribeProvisioningRequest)
}

// DescribeProvisioningRequest is a request's conditions in one line.
func DescribeProvisioningRequest(pr *provv1.ProvisioningRequest) string {
	return fmt.Sprintf("ProvisioningRequest %s/%s conditions %s", pr.Namespace, pr.Name, describeConditions(pr.Status.Conditions))
}

// WaitForReservation waits until the Reservation name exists and cond
// holds for it, and returns the last reservation read. what says what cond
// checks, for the error ("Available").
func WaitForReservation(ctx context.Context, timeout time.Duration, c gantryclient.Interface, name, what string,
	cond func(*schedv1alpha1.Reservation) bool) (*schedv1alpha1.Reservation, error) {
	return WaitFor(ctx, timeout, fmt.Sprintf("Reservation %s %s", name, what),
		func(ctx context.Context) (*schedv1alpha1.Reservation, error) {
			return c.SchedulingV1alpha1().Reservations().Get(ctx, name, metav1.GetOptions{})
		}, cond, DescribeReservation)
}

// ReservationAvailable holds for a reservation placed on a node.
func ReservationAvailable(r *schedv1alpha1.Reservation) bool {
	return r.Status.Phase == schedv1alpha1.ReservationAvailable && r.Status.NodeName != ""
}

// DescribeReservation is a reservation's state in one line.
func DescribeReservation(r *schedv1alpha1.Reservation) string {
	return fmt.Sprintf("Reservation %s phase %q on %q, %d current owners, conditions %s",
		r.Name, r.Status.Phase, r.Status.NodeName, len(r.Status.CurrentOwners), describeConditions(r.Status.Conditions))
}

func describeConditions(conds []metav1.Condition) string {
	if len(conds) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
