//go:build integration

package integration

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
)

// TestRequestLimits: a tenant's request cannot make the provisioner
// allocate or hold more than the limits allow. A count of 10^9 Fails with
// TooManyPods while a normal request sent with it is booked; a validity of
// 68 years Fails with InvalidParameter; and a namespace's bookings count
// against its quota, so a second request past the quota Fails with
// QuotaExceeded while the first one's booking is held.
func TestRequestLimits(t *testing.T) {
	e := setup(t)
	e.template("default", "workers", "1")

	t.Run("a huge count fails, a normal request beside it is booked", func(t *testing.T) {
		e.t = t
		e.request("default", "huge", provv1.ClassCheckCapacity, "workers", 1000000000, nil)
		e.request("default", "normal", provv1.ClassCheckCapacity, "workers", 2, nil)
		e.expectFailed("default", "huge", provisioning.ReasonTooManyPods,
			"asks for 1000000000 pods (the sum of spec.podSets[*].count), more than the 5000 pods per request", "the count and the limit")
		e.waitCondition("default", "normal", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		if got := e.bookings(e.uid("default", "huge")); len(got) != 0 {
			t.Errorf("%d reservations booked for a request over the limit", len(got))
		}
		e.deleteRequest("default", "normal")
	})

	t.Run("a validity past the maximum fails", func(t *testing.T) {
		e.t = t
		e.request("default", "forever", provv1.ClassCheckCapacity, "workers", 1,
			map[string]provv1.Parameter{provv1.ParameterValidUntilSeconds: "2147483647"})
		e.expectFailed("default", "forever", provisioning.ReasonInvalidParameter, "ValidUntilSeconds must be at most 604800 seconds", "the maximum")
	})

	t.Run("bookings held count against the quota", func(t *testing.T) {
		e.t = t
		e.namespaceWithQuota("holding", "4")
		e.template("holding", "workers", "1")
		e.request("holding", "first", provv1.ClassCheckCapacity, "workers", 3, nil)
		e.waitCondition("holding", "first", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		// 3 CPUs booked and 2 more asked for: past the quota of 4, though
		// no pod runs in the namespace and the cluster has the room.
		e.request("holding", "second", provv1.ClassCheckCapacity, "workers", 2, nil)
		e.expectFailed("holding", "second", provisioning.ReasonQuotaExceeded,
			"cpu: requests.cpu requested 2, used 0, held by the namespace's other requests 3, limited 4", "the bookings held")
		if got := e.bookings(e.uid("holding", "second")); len(got) != 0 {
			t.Errorf("%d reservations booked past the quota", len(got))
		}
		if booked, _ := e.bookedPods(e.uid("holding", "first")); booked != 3 {
			t.Errorf("the first request's booking holds %d pods, want 3", booked)
		}
		// Once the first booking is released, the same request fits.
		e.deleteRequest("holding", "first")
		e.request("holding", "third", provv1.ClassCheckCapacity, "workers", 2, nil)
		e.waitCondition("holding", "third", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
	})
}

// TestBookingsPerNamespaceLimit: a booking that would take its namespace's
// live Reservations past --max-bookings-per-namespace is not made, and says
// so; another namespace's bookings are not held up by it.
func TestBookingsPerNamespaceLimit(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(2, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner(func(o *app.Options) { o.MaxBookingsPerNamespace = 3 })
	e.template("default", "big", "3")
	e.template("default", "small", "1")
	// One pod of 3 CPUs a node: 2 Reservations.
	e.request("default", "first", provv1.ClassCheckCapacity, "big", 2, nil)
	e.waitCondition("default", "first", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
	// The 1 CPU left on each node: 2 more Reservations, 4 of 3.
	e.request("default", "second", provv1.ClassCheckCapacity, "small", 2, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
	e.expectFailed("default", "second", provv1.ReasonCapacityIsNotFound,
		"the booking needs 2 Reservations and namespace default's requests hold 2, of the 3 they may hold at once (--max-bookings-per-namespace)", "the limit")
	if got := e.bookings(e.uid("default", "second")); len(got) != 0 {
		t.Errorf("%d reservations booked past the limit", len(got))
	}
	e.namespaceWithQuota("other", "100")
	e.template("other", "small", "1")
	e.request("other", "neighbour", provv1.ClassCheckCapacity, "small", 2, nil)
	e.waitCondition("other", "neighbour", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
}
