//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestBookingPriority: a booking holds its capacity at the priority its
// pods would get from their PriorityClass (issue 14's reproduction: a
// booking for a class of 100000 got 0 and a priority-10 pod preempted it,
// revoking the request). The template's own spec.priority decides
// nothing, and a class that does not exist fails the request. The
// provisioner runs as its shipped ServiceAccount: it may read
// PriorityClasses.
func TestBookingPriority(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for name, value := range map[string]int32{"high": 100000, "low": 10} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// template creates a PodTemplate of pods of 4 CPUs (a node each) with
	// priorityClassName class and a spec.priority forged to forged.
	template := func(name, class string, forged int32) {
		t.Helper()
		pt := wrappers.MakePodTemplate(name, "default").Requests("cpu", "4").Obj()
		pt.Template.Spec.PriorityClassName = class
		pt.Template.Spec.Priority = ptr.To(forged)
		if _, err := e.Client.CoreV1().PodTemplates("default").Create(ctx, pt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	priorities := func(uid string) []int32 {
		var out []int32
		for _, r := range e.bookings(uid) {
			out = append(out, ptr.Deref(r.Spec.Template.Priority, -1))
		}
		return out
	}

	t.Run("the class's priority; a lower pod does not preempt the booking", func(t *testing.T) {
		e.t = t
		// spec.priority 0 disagrees with the class, as the issue's
		// template without one got 0.
		template("high-workers", "high", 0)
		e.request("default", "high", provv1.ClassCheckCapacity, "high-workers", 2, nil)
		e.waitCondition("default", "high", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		uid := e.uid("default", "high")
		if got := priorities(uid); len(got) != 2 || got[0] != 100000 || got[1] != 100000 {
			t.Errorf("booking priorities %v, want [100000 100000] (class high; the template's 0 is forged)", got)
		}
		// The booking fills both nodes: a pod of priority 10 finds no room,
		// and preempting the booking is not allowed to it.
		p := wrappers.MakePod("low", "default").Requests("cpu", "1").PriorityClass("low").NoGrace().Obj()
		if _, err := e.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(util.ConsistentDuration)
		if rs := e.bookings(uid); len(rs) != 2 {
			t.Errorf("%d reservations left of the booking of 2 after a priority-10 pod came", len(rs))
		}
		for _, r := range e.bookings(uid) {
			if r.Status.Phase != schedv1alpha1.ReservationAvailable {
				t.Errorf("booking %s is %s after a priority-10 pod came, want Available: %+v", r.Name, r.Status.Phase, r.Status.Conditions)
			}
		}
		pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "high", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionCapacityRevoked); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("the request went CapacityRevoked: %s", c.Message)
		}
		if n := e.nodeOf("low"); n != "" {
			t.Errorf("the priority-10 pod took booked capacity on %s", n)
		}
		e.deletePods("low")
		e.deleteRequest("default", "high")
	})

	for _, tc := range []struct {
		test, request, class string
		want                 int32
		why                  string
	}{
		{"a forged spec.priority does not raise the class's", "escalating", "high", 100000, "class high; the template's 2147483647 is forged"},
		{"no class: the forged spec.priority is ignored", "forged", "", 0, "no class, no default class"},
	} {
		t.Run(tc.test, func(t *testing.T) {
			e.t = t
			template(tc.request+"-workers", tc.class, 2147483647)
			e.request("default", tc.request, provv1.ClassCheckCapacity, tc.request+"-workers", 1, nil)
			e.waitCondition("default", tc.request, provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
			if got := priorities(e.uid("default", tc.request)); len(got) != 1 || got[0] != tc.want {
				t.Errorf("booking priorities %v, want [%d] (%s)", got, tc.want, tc.why)
			}
			e.deleteRequest("default", tc.request)
		})
	}

	t.Run("a missing class fails the request", func(t *testing.T) {
		e.t = t
		template("gold-workers", "gold", 0)
		e.request("default", "gold", provv1.ClassCheckCapacity, "gold-workers", 1, nil)
		e.expectFailed("default", "gold", provisioning.ReasonPriorityClassNotFound, `no PriorityClass "gold"`, "which class is missing")
		if got := e.bookings(e.uid("default", "gold")); len(got) != 0 {
			t.Errorf("%d reservations booked for a missing class", len(got))
		}
	})

	t.Run("a system class outside kube-system fails the request", func(t *testing.T) {
		e.t = t
		template("critical-workers", "system-cluster-critical", 2000000000)
		e.request("default", "critical", provv1.ClassCheckCapacity, "critical-workers", 1, nil)
		e.expectFailed("default", "critical", provisioning.ReasonPriorityClassForbidden, "namespace default may not use", "why the class is refused")
	})
}
