//go:build integration

package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
)

// TestAtomicScaleUp runs the atomic scale-up handler on the kwok provider
// against a real kube-apiserver and Gantry's scheduler.
func TestAtomicScaleUp(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.CreateNodes(1, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startKubelet()
	e.startProvisioner(e.withNodeGroups)
	e.template("default", "workers", "2")
	e.class("atomic-pool", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}})

	t.Run("scales up all at once, books, consumers land, cancellation keeps used nodes", func(t *testing.T) {
		e.t = t
		// node-0 holds 2 of the 10 two-CPU pods; 4 new 4-CPU nodes the rest.
		e.request("default", "big", "atomic-pool", "workers", 10, nil)
		c := e.waitCondition("default", "big", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsProvisioned, util.LongTimeout)
		t.Logf("Provisioned: %s", c.Message)
		if got := e.groupNodes("pool"); len(got) != 4 {
			t.Fatalf("%d pool nodes, want 4", len(got))
		}
		uid := e.uid("default", "big")
		if booked, _ := e.bookedPods(uid); booked != 10 {
			t.Fatalf("%d pods booked, want 10", booked)
		}
		e.expectBookingHonoured("big", "2")
		// Scale-down leaves booked nodes alone, however long they wait.
		if got := e.groupNodes("pool"); len(got) != 4 {
			t.Fatalf("%d pool nodes while booked, want 4", len(got))
		}
		used := e.nodeOf("consumer")
		e.deleteRequest("default", "big")
		// The outsider takes room too once the booking is released; every
		// pool node without a pod goes.
		util.Must(t).Until(ctx, util.Timeout, "unused pool nodes removed", func(context.Context) bool {
			for _, n := range e.groupNodes("pool") {
				if n.Name != used && n.Name != e.nodeOf("outsider") {
					return false
				}
			}
			return true
		})
		if e.nodeOf("consumer") != used {
			t.Fatal("the consumer lost its node")
		}
		e.deletePods("outsider", "consumer")
		util.Must(t).Until(ctx, util.Timeout, "pool scaled down once empty", func(context.Context) bool { return len(e.groupNodes("pool")) == 0 })
		if _, err := e.Client.CoreV1().Nodes().Get(ctx, "node-0", metav1.GetOptions{}); err != nil {
			t.Errorf("scale-down removed a node the provisioner did not create: %v", err)
		}
	})

	t.Run("a node never Ready: rolled back, retried until the validity ends", func(t *testing.T) {
		e.t = t
		e.class("atomic-flaky", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"flaky"},
			ProvisioningTimeout: seconds(3 * time.Second), ValidUntilSeconds: ptr.To[int32](12),
			Backoff: &autoscalingv1alpha1.Backoff{Initial: seconds(time.Second), Max: seconds(time.Second)}})
		e.request("default", "flaky", "atomic-flaky", "workers", 6, nil)
		maxSeen := 0
		var c *metav1.Condition
		util.Must(t).Poll(ctx, util.LongTimeout, "request flaky Failed", func(ctx context.Context) (bool, error) {
			maxSeen = max(maxSeen, len(e.groupNodes("flaky")))
			pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "flaky", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c = meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionFailed)
			return c != nil, errors.New(util.DescribeProvisioningRequest(pr))
		})
		if c.Reason != provisioning.ReasonValidityExpired || !strings.Contains(c.Message, "were not Ready within the provisioning timeout") {
			t.Errorf("Failed: %s: %s", c.Reason, c.Message)
		}
		t.Logf("Failed: %s", c.Message)
		if maxSeen != 2 {
			t.Errorf("saw up to %d flaky nodes at once, want the 2 of one attempt", maxSeen)
		}
		pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := pr.Annotations[provisioning.AnnotationAttempts]; n == "" || n == "1" {
			t.Errorf("attempts %q: want the attempt retried", n)
		}
		if got := e.groupNodes("flaky"); len(got) != 0 {
			t.Errorf("%d flaky nodes left behind", len(got))
		}
		if got := e.bookings(string(pr.UID)); len(got) != 0 {
			t.Errorf("%d reservations left behind", len(got))
		}
	})

	t.Run("a create error rolls the attempt back at once; noRetry fails", func(t *testing.T) {
		e.t = t
		e.class("atomic-broken", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"broken"}})
		e.request("default", "broken", "atomic-broken", "workers", 6, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
		e.expectFailed("default", "broken", provv1.ReasonCapacityIsNotFound, "injected failure", "the provider's error")
		if got := e.groupNodes("broken"); len(got) != 0 {
			t.Errorf("%d nodes of a failed scale-up left behind", len(got))
		}
	})

	t.Run("a pod no node group can hold fails at once", func(t *testing.T) {
		e.t = t
		e.template("default", "giant", "64")
		e.request("default", "giant", "atomic-pool", "giant", 1, nil)
		e.expectFailed("default", "giant", provisioning.ReasonNoNodeGroupFits, "pool: 1 Insufficient cpu", "why no node group fits")
		if got := e.groupNodes("pool"); len(got) != 0 {
			t.Errorf("%d nodes created for a pod no node can hold", len(got))
		}
	})

	t.Run("deleting a request stops its attempt and removes its nodes", func(t *testing.T) {
		e.t = t
		e.class("atomic-stuck", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"stuck"}})
		e.request("default", "stuck", "atomic-stuck", "workers", 6, nil)
		e.waitCondition("default", "stuck", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp, util.Timeout)
		if got := e.groupNodes("stuck"); len(got) != 2 {
			t.Fatalf("%d stuck nodes, want 2", len(got))
		}
		e.deleteRequest("default", "stuck")
		if got := e.groupNodes("stuck"); len(got) != 0 {
			t.Errorf("%d nodes of a cancelled attempt left behind", len(got))
		}
	})

	t.Run("an expired booking's nodes are scaled down", func(t *testing.T) {
		e.t = t
		e.class("atomic-brief", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}, BookingDuration: seconds(3 * time.Second)})
		e.request("default", "brief", "atomic-brief", "workers", 6, nil)
		e.waitCondition("default", "brief", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsProvisioned, util.LongTimeout)
		n := len(e.groupNodes("pool"))
		if n == 0 {
			t.Fatal("no pool nodes")
		}
		e.waitCondition("default", "brief", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonBookingExpired, util.Timeout)
		util.Must(t).Until(ctx, util.Timeout, "expired booking's nodes scaled down", func(context.Context) bool { return len(e.groupNodes("pool")) == 0 })
		t.Logf("%d nodes scaled down after the booking expired", n)
	})

	e.t = t
	for _, name := range []string{"nodes_created", "nodes_rolled_back", "nodes_scaled_down"} {
		if v := counterSum(t, "gantry_provisioning_"+name+"_total"); v == 0 {
			t.Errorf("gantry_provisioning_%s_total is 0", name)
		} else {
			t.Logf("gantry_provisioning_%s_total = %v", name, v)
		}
	}
}

// TestRestartMidScaleUp: the provisioner stops while its attempt's nodes
// come up; the next one finds the attempt on the request, waits for the
// same nodes and books them, creating no node twice.
func TestRestartMidScaleUp(t *testing.T) {
	e := newEnv(t)
	e.StartScheduler(schedtest.GantryProfile)
	e.template("default", "workers", "2")
	e.class("atomic-pool", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}})
	stop := e.startProvisioner(e.withNodeGroups)
	e.request("default", "resumed", "atomic-pool", "workers", 4, nil)
	e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp, util.Timeout)
	before := e.groupNodes("pool")
	stop()
	if len(before) != 2 {
		t.Fatalf("%d nodes created, want 2", len(before))
	}
	// The nodes come up while no provisioner runs.
	e.startKubelet()
	e.startProvisioner(e.withNodeGroups)
	e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsProvisioned, util.LongTimeout)
	after := e.groupNodes("pool")
	if len(after) != 2 || after[0].UID != before[0].UID || after[1].UID != before[1].UID {
		t.Errorf("nodes changed across the restart: %d before, %d after", len(before), len(after))
	}
	if placed := placedPods(e.bookings(e.uid("default", "resumed"))); placed != 4 {
		t.Errorf("room for %d of 4 pods placed", placed)
	}
}

// TestScaleUpsInFlightCountAgainstQuota: two atomic requests created
// together, each within its namespace's quota and both together past it,
// each needing new nodes: one is Provisioned, the other fails on the quota
// (before, both were: the scale-up in flight held nothing).
func TestScaleUpsInFlightCountAgainstQuota(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(1, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startKubelet()
	e.startProvisioner(e.withNodeGroups)
	e.class("atomic-pool", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}})
	e.namespaceWithQuota("tenant", "12")
	e.template("tenant", "workers", "2")
	// 4 pods of 2 CPUs each: 8 of the quota's 12, beyond node-0's 4.
	e.request("tenant", "first", "atomic-pool", "workers", 4, nil)
	e.request("tenant", "second", "atomic-pool", "workers", 4, nil)
	var provisioned, failed []string
	util.Must(t).Until(context.Background(), util.LongTimeout, "both requests decided", func(context.Context) bool {
		provisioned, failed = nil, nil
		for _, name := range []string{"first", "second"} {
			pr := e.get("tenant", name)
			if meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned) {
				provisioned = append(provisioned, name)
			}
			if c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
				if c.Reason != provisioning.ReasonQuotaExceeded {
					t.Fatalf("%s failed for %s: %s", name, c.Reason, c.Message)
				}
				failed = append(failed, name)
			}
		}
		return len(provisioned)+len(failed) == 2
	})
	if len(provisioned) != 1 || len(failed) != 1 {
		t.Fatalf("provisioned %v, failed on the quota %v; want one of each", provisioned, failed)
	}
	refused := e.get("tenant", failed[0])
	c := meta.FindStatusCondition(refused.Status.Conditions, provv1.ConditionFailed)
	t.Logf("%s: %s", failed[0], c.Message)
	// Refused before it scaled up: the other's scale-up in flight held the
	// room (a refusal only when its own nodes were Ready would leave
	// Provisioned at ScalingUp, after adding and removing nodes).
	if p := meta.FindStatusCondition(refused.Status.Conditions, provv1.ConditionProvisioned); p == nil || p.Reason != provisioning.ReasonQuotaExceeded {
		t.Errorf("%s: Provisioned %+v, want reason %s (refused before any scale-up)", failed[0], p, provisioning.ReasonQuotaExceeded)
	}
	if got := e.bookings(e.uid("tenant", failed[0])); len(got) != 0 {
		t.Errorf("%d reservations booked for the request past the quota", len(got))
	}
}
