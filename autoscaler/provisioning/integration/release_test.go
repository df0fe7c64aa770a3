//go:build integration

package integration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/test/util"
)

// TestDeleteRightAfterBooking: a request deleted the moment its booking is
// made leaves no Reservation behind once its finalizer is gone; and a
// request re-created under the name of one whose finalizer was removed by
// hand does not inherit the old bookings (its pods name the request, not
// its UID): they are deleted, and the new request books its own.
func TestDeleteRightAfterBooking(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.CreateNodes(2, "4")
	e.template("default", "workers", "1")
	// No scheduler: the bookings stay unplaced, the request at
	// BookingCapacity.
	stop := e.startProvisioner()

	e.request("default", "fast", provv1.ClassCheckCapacity, "workers", 5, nil)
	e.waitCondition("default", "fast", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonBooking, util.Timeout)
	uid := e.uid("default", "fast")
	e.deleteRequest("default", "fast")
	if left := e.bookings(uid); len(left) != 0 {
		t.Errorf("%d Reservations left behind once the finalizer was removed, want 0", len(left))
	}

	e.request("default", "reused", provv1.ClassCheckCapacity, "workers", 3, nil)
	e.waitCondition("default", "reused", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonBooking, util.Timeout)
	oldUID := e.uid("default", "reused")
	if len(e.bookings(oldUID)) == 0 {
		t.Fatal("the first request has no booking")
	}
	// The provisioner is away while someone removes the finalizer by
	// hand: nothing releases the booking then.
	stop()
	requests := e.Gantry.AutoscalingXV1().ProvisioningRequests("default")
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := requests.Patch(ctx, "reused", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.deleteRequest("default", "reused")
	e.request("default", "reused", provv1.ClassCheckCapacity, "workers", 3, nil)
	newUID := e.uid("default", "reused")
	e.startProvisioner()
	e.waitCondition("default", "reused", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonBooking, util.Timeout)
	util.Must(t).Until(ctx, util.Timeout, "the earlier request's bookings deleted", func(context.Context) bool {
		return len(e.bookings(oldUID)) == 0
	})
	if booked, _ := e.bookedPods(newUID); booked != 3 {
		t.Errorf("the re-created request booked %d pods, want its own 3", booked)
	}
}
