//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestCheckCapacity: a request that fits is Provisioned and booked; the
// booking keeps other pods off and lets consumers in; deleting the request
// releases what is left. A request that does not fit fails at once with
// noRetry, and after its validity otherwise. A missing PodTemplate is
// waited for. A namespace quota that cannot admit the pods fails the
// request without booking anything. A short booking expires.
func TestCheckCapacity(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.template("default", "workers", "1")

	t.Run("fits, is booked, keeps others off, consumed, released", func(t *testing.T) {
		e.t = t
		e.request("default", "fits", provv1.ClassCheckCapacity, "workers", 8, nil)
		c := e.waitCondition("default", "fits", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		t.Logf("Provisioned: %s", c.Message)
		uid := e.uid("default", "fits")
		// 4 pods on each node: one shared Reservation per node.
		if got, _ := e.bookedPods(uid); got != 8 || len(e.bookings(uid)) != 2 {
			t.Fatalf("%d pods booked in %d reservations, want 8 in 2", got, len(e.bookings(uid)))
		}
		if g := gauge(t, "gantry_provisioning_bookings_active"); g != 8 {
			t.Errorf("gantry_provisioning_bookings_active = %v, want 8", g)
		}
		e.expectBookingHonoured("fits", "1")
		util.Must(t).Until(ctx, util.Timeout, "consumer in its booking", func(context.Context) bool {
			_, came := e.bookedPods(uid)
			return came == 1
		})
		if g := gauge(t, "gantry_provisioning_bookings_active"); g != 7 {
			t.Errorf("gantry_provisioning_bookings_active = %v with 1 of 8 pods come, want 7", g)
		}
		e.deleteRequest("default", "fits")
		util.Must(t).Until(ctx, util.Timeout, "booking released", func(context.Context) bool { return len(e.bookings(uid)) == 0 })
		if g := gauge(t, "gantry_provisioning_bookings_active"); g != 0 {
			t.Errorf("gantry_provisioning_bookings_active = %v after the release, want 0", g)
		}
		util.Must(t).Until(ctx, util.Timeout, "outsider scheduled once the booking is released", func(context.Context) bool { return e.nodeOf("outsider") != "" })
		e.deletePods("outsider", "consumer")
	})

	t.Run("does not fit, noRetry", func(t *testing.T) {
		e.t = t
		e.request("default", "too-big", provv1.ClassCheckCapacityLegacy, "workers", 20, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
		e.expectFailed("default", "too-big", provv1.ReasonCapacityIsNotFound, "Insufficient cpu", "the scheduler's reason")
		if got := e.bookings(e.uid("default", "too-big")); len(got) != 0 {
			t.Errorf("%d reservations left by a failed request", len(got))
		}
	})

	t.Run("does not fit, retried until its validity ends", func(t *testing.T) {
		e.t = t
		e.request("default", "short-lived", provv1.ClassCheckCapacity, "workers", 20, map[string]provv1.Parameter{provv1.ParameterValidUntilSeconds: "4"})
		c := e.waitCondition("default", "short-lived", provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound, util.Timeout)
		t.Logf("Provisioned=False: %s", c.Message)
		e.waitCondition("default", "short-lived", provv1.ConditionFailed, metav1.ConditionTrue, provisioning.ReasonValidityExpired, util.Timeout)
	})

	t.Run("waits for a missing PodTemplate", func(t *testing.T) {
		e.t = t
		e.request("default", "early", provv1.ClassCheckCapacity, "later", 2, nil)
		e.waitCondition("default", "early", provv1.ConditionAccepted, metav1.ConditionFalse, provisioning.ReasonPodTemplateNotFound, util.Timeout)
		e.template("default", "later", "500m")
		e.waitCondition("default", "early", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		_ = e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Delete(ctx, "early", metav1.DeleteOptions{})
	})

	t.Run("quota exceeded", func(t *testing.T) {
		e.t = t
		e.namespaceWithQuota("limited", "2")
		e.template("limited", "workers", "1")
		e.request("limited", "greedy", provv1.ClassCheckCapacity, "workers", 3, nil)
		e.expectFailed("limited", "greedy", provisioning.ReasonQuotaExceeded, "requests.cpu requested 3", "what was exceeded")
		if got := e.bookings(e.uid("limited", "greedy")); len(got) != 0 {
			t.Errorf("%d reservations booked past the quota", len(got))
		}
	})

	t.Run("a short booking expires", func(t *testing.T) {
		e.t = t
		pc := wrappers.MakeProvisioningClass("brief", autoscalingv1alpha1.HandlerCheckCapacity).BookingDuration(3 * time.Second).Obj()
		if _, err := e.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.request("default", "brief", "brief", "workers", 2, nil)
		e.waitCondition("default", "brief", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		c := e.waitCondition("default", "brief", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonBookingExpired, util.Timeout)
		t.Logf("BookingExpired: %s", c.Message)
		uid := e.uid("default", "brief")
		util.Must(t).Until(ctx, util.Timeout, "expired booking released", func(context.Context) bool { return len(e.bookings(uid)) == 0 })
	})

	// Requests of classes the provisioner does not serve are left alone.
	e.t = t
	e.request("default", "elsewhere", "queued-provisioning.example.com", "workers", 1, nil)
	time.Sleep(util.ConsistentDuration)
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "elsewhere", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Status.Conditions) != 0 || len(pr.Finalizers) != 0 {
		t.Errorf("a request of another class was touched: %+v, finalizers %v", pr.Status.Conditions, pr.Finalizers)
	}
}

// TestRestartMidBooking: the provisioner stops after booking and before the
// scheduler has placed the booking; a new one (a new leader) takes over,
// confirms the same booking once the scheduler runs, and creates nothing
// twice.
func TestRestartMidBooking(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(2, "4")
	e.template("default", "workers", "1")
	// The production placement timeout: the scheduler starts only after
	// the restart, and must not be raced by the test's short default.
	patient := func(o *app.Options) { o.PlacementTimeout = 30 * time.Second }
	stop := e.startProvisioner(patient)
	e.request("default", "resumed", provv1.ClassCheckCapacity, "workers", 5, nil)
	// A chain of steps (the provisioner starts, simulates and creates five
	// reservations): it once took over 30 s in a cold CI run, where the
	// other packages compile and test at the same time.
	e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonBooking, util.LongTimeout)
	uid := e.uid("default", "resumed")
	before := e.bookings(uid)
	if booked, _ := e.bookedPods(uid); booked != 5 {
		t.Fatalf("%d pods booked, want 5", booked)
	}
	stop()

	// No scheduler ran so far: the booking waits to be placed.
	e.startProvisioner(patient)
	e.StartScheduler(schedtest.GantryProfile)
	c := e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.LongTimeout)
	t.Logf("after the restart: %s", c.Message)
	after := e.bookings(uid)
	if len(after) != len(before) {
		t.Fatalf("%d reservations after the restart, want the same %d", len(after), len(before))
	}
	names := map[string]bool{}
	for _, r := range before {
		names[r.Name] = true
	}
	for _, r := range after {
		if !names[r.Name] {
			t.Errorf("reservation %s was created after the restart: the booking was redone", r.Name)
		}
	}
	pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(context.Background(), "resumed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := pr.Annotations[provisioning.AnnotationAttempts]; n != "" {
		t.Errorf("the restart counted as a failed attempt (%s)", n)
	}
}

// TestBookingNotPlacedNamesNodeAndReason: the room the simulation booked is
// taken before the scheduler places the booking (a pod bound to the node
// directly, as a kubelet's static pod would be). The attempt is released
// when the placement timeout ends (and, with noRetry, the request fails);
// the condition names the booked node and
// the scheduler's filter verdict there, and the metric counts the pod.
func TestBookingNotPlacedNamesNodeAndReason(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(1, "4")
	e.template("default", "workers", "3")
	e.startProvisioner(func(o *app.Options) { o.PlacementTimeout = 3 * time.Second })
	before := counterSum(t, "gantry_provisioning_booked_pods_not_placed_total")
	// noRetry: the failed attempt ends the request, so that no later
	// attempt's message replaces the one checked here.
	e.request("default", "squeezed", provv1.ClassCheckCapacity, "workers", 1, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
	// No scheduler yet: the booking waits to be placed.
	e.waitCondition("default", "squeezed", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonBooking, util.LongTimeout)
	rs := e.bookings(e.uid("default", "squeezed"))
	if len(rs) != 1 {
		t.Fatalf("%d Reservations, want 1", len(rs))
	}
	node := rs[0].Spec.Template.NodeName
	squatter := wrappers.MakePod("squatter", "default").Requests("cpu", "2").NodeName(node).NoGrace().Obj()
	if _, err := e.Client.CoreV1().Pods("default").Create(context.Background(), squatter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.StartScheduler(schedtest.GantryProfile)
	c := e.waitCondition("default", "squeezed", provv1.ConditionFailed, metav1.ConditionTrue, provv1.ReasonCapacityIsNotFound, util.LongTimeout)
	t.Logf("after the timeout: %s", c.Message)
	want := "node " + node + ": Insufficient cpu (NodeResourcesFit)"
	if !strings.Contains(c.Message, want) {
		t.Errorf("condition %q does not say %q", c.Message, want)
	}
	if got := counterSum(t, "gantry_provisioning_booked_pods_not_placed_total") - before; got < 1 {
		t.Errorf("booked pods not placed counted %v, want at least 1", got)
	}
}
