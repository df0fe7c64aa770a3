//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func pod(name, class, cpu string) *v1.Pod {
	// No kubelet here: a deleted pod is gone at once only without a grace period.
	return wrappers.MakePod(name, "default").Requests("cpu", cpu).PriorityClass(class).NoGrace().Obj()
}

func priorityClass(name string, value int32) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
}

// env is one node of 4 CPUs full with four 1-CPU pods low-0..3 of
// priority class low, and Gantry's scheduler.
type env struct {
	*schedtest.Env
	t *testing.T
}

// setup creates priority classes low (1), high (100) and classes, the node
// and the low pods, and waits until the low pods run.
func setup(t *testing.T, classes ...*schedulingv1.PriorityClass) *env {
	t.Helper()
	return setupWithArgs(t, nil, classes...)
}

// setupWithArgs is setup with extra kube-apiserver flags.
func setupWithArgs(t *testing.T, apiserverArgs []string, classes ...*schedulingv1.PriorityClass) *env {
	t.Helper()
	e := &env{Env: schedtest.SetupWithArgs(t, apiserverArgs...), t: t}
	e.CreateNodes(1, "4")
	for _, pc := range append([]*schedulingv1.PriorityClass{priorityClass("low", 1), priorityClass("high", 100)}, classes...) {
		if _, err := e.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.StartScheduler(schedtest.GantryProfile)
	for i := range 4 {
		e.create(pod(fmt.Sprintf("low-%d", i), "low", "1"))
	}
	for i := range 4 {
		e.waitScheduled(fmt.Sprintf("low-%d", i), util.Timeout)
	}
	return e
}

func (e *env) create(p *v1.Pod) {
	e.t.Helper()
	if _, err := e.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitScheduled waits until the pod default/name is bound, and returns
// how long that took.
func (e *env) waitScheduled(name string, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	util.Must(e.t).WaitForPod(context.Background(), timeout, e.Client, "default", name, "scheduled", util.PodScheduled)
	return time.Since(start)
}

// lowDeletes is how many delete requests each low-i pod got.
func (e *env) lowDeletes() map[int]int {
	n := map[int]int{}
	for i := range 4 {
		n[i] = e.Faults.Count(http.MethodDelete, fmt.Sprintf("/api/v1/namespaces/default/pods/low-%d", i))
	}
	return n
}

// counter reads a counter of the process's registry; labels select the
// series (none: the only one).
func counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestFailedDeletesClearNominationAndRetry: the apiserver fails victim
// deletes. The preemptor must not stay nominated, must be retried after its
// backoff (not left for the periodic flush), and once deletes work again it
// is scheduled; no victim is deleted twice; the error shows in the metrics.
func TestFailedDeletesClearNominationAndRetry(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	errorsBefore := counter(t, "gantry_preemption_goroutine_executions_total", "result", "error")

	e.Faults.Fail(http.MethodDelete, "/pods/low-", http.StatusInternalServerError)
	e.create(pod("high", "high", "2"))

	// The failure clears status.nominatedNodeName (it was set when the
	// preemption started).
	util.Must(t).Until(ctx, util.Timeout, "preemption failure recorded", func(context.Context) bool {
		return counter(t, "gantry_preemption_goroutine_executions_total", "result", "error") > errorsBefore
	})
	util.Must(t).WaitForPod(ctx, util.Timeout, e.Client, "default", "high", "neither nominated nor scheduled", func(p *v1.Pod) bool {
		return p.Status.NominatedNodeName == "" && p.Spec.NodeName == ""
	})

	// Deletes work again: the retry (after a backoff of seconds, not the
	// five-minute flush) preempts and the preemptor runs.
	before := e.lowDeletes()
	e.Faults.Clear()
	took := e.waitScheduled("high", util.LongTimeout)
	t.Logf("preemptor scheduled %v after deletes recovered", took.Round(100*time.Millisecond))

	if left := e.lowLeft(); left != 2 {
		t.Errorf("%d low-priority pods left, want 2 (2 CPU freed for the 2-CPU preemptor)", left)
	}
	e.expectDeletedAtMostOnce(before)
	if counter(t, "gantry_preemption_goroutine_executions_total", "result", "success") < 1 {
		t.Error("no successful preemption in the metrics")
	}
}

// TestSecondPreemptorWhileFirstInFlight covers KEP-4832's races: while a
// first preemption's (slowed) deletes are in flight, a second pod of
// higher, equal or lower priority arrives and preempts too. Both must end
// up running, the second never takes the first's nominated room, the right
// number of victims go, and none is deleted twice.
func TestSecondPreemptorWhileFirstInFlight(t *testing.T) {
	for name, tc := range map[string]struct {
		class, cpu string
		wantLeft   int
	}{
		"higher": {"higher", "2", 0},
		"equal":  {"high", "2", 0},
		"lower":  {"medium", "1", 1},
	} {
		t.Run(name, func(t *testing.T) {
			e := setup(t, priorityClass("medium", 50), priorityClass("higher", 200))
			e.Faults.Delay(http.MethodDelete, "/pods/low-", 2*time.Second)
			e.create(pod("first", "high", "2"))
			util.Must(t).WaitForPod(context.Background(), util.Timeout, e.Client, "default", "first", "nominated", func(p *v1.Pod) bool {
				return p.Status.NominatedNodeName != ""
			})
			e.create(pod("second", tc.class, tc.cpu))

			e.waitScheduled("first", util.LongTimeout)
			e.waitScheduled("second", util.LongTimeout)
			if left := e.lowLeft(); left != tc.wantLeft {
				t.Errorf("%d low-priority pods left, want %d", left, tc.wantLeft)
			}
			e.expectDeletedAtMostOnce(nil)
		})
	}
}

// TestPendingReservationPreempts: a pending reservation of higher priority
// than the running pods preempts room for itself, as a pod would, while its
// victims' deletes are slow. A non-preempting pod of lower priority than
// the reservation, created meanwhile, must not take the room the victims
// free: the reservation is nominated there.
func TestPendingReservationPreempts(t *testing.T) {
	never := priorityClass("medium-never", 50)
	never.PreemptionPolicy = ptr.To(v1.PreemptNever)
	e := setup(t, never)
	ctx := context.Background()
	e.Faults.Delay(http.MethodDelete, "/pods/low-", 2*time.Second)
	r := wrappers.MakeReservation("big", "cpu", "2").Priority(100).SchedulerName(v1.DefaultSchedulerName).OwnerPod("default", "someone").Obj()
	if _, err := e.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	util.Must(t).Until(ctx, util.Timeout, "first victim delete sent", func(context.Context) bool {
		for _, n := range e.lowDeletes() {
			if n > 0 {
				return true
			}
		}
		return false
	})
	e.create(pod("intruder", "medium-never", "1"))

	util.Must(t).WaitForReservation(ctx, util.LongTimeout, e.Gantry, "big", "Available", util.ReservationAvailable)
	// The intruder had every chance to land while the victims left.
	time.Sleep(util.ConsistentDuration)
	in, err := e.Client.CoreV1().Pods("default").Get(ctx, "intruder", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.NodeName != "" {
		t.Errorf("the non-preempting intruder took room preempted for the reservation (node %s)", in.Spec.NodeName)
	}
	if left := e.lowLeft(); left != 2 {
		t.Errorf("%d low-priority pods left, want 2 (2 CPU preempted for the reservation)", left)
	}
	e.expectDeletedAtMostOnce(nil)
}

// lowLeft is how many low-priority pods ("low-…") exist.
func (e *env) lowLeft() int {
	e.t.Helper()
	pods, err := e.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	left := 0
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "low-") {
			left++
		}
	}
	return left
}

// expectDeletedAtMostOnce checks that no low-i pod got more than one
// delete request (beyond before[i], when given).
func (e *env) expectDeletedAtMostOnce(before map[int]int) {
	e.t.Helper()
	for i, n := range e.lowDeletes() {
		if n -= before[i]; n > 1 {
			e.t.Errorf("low-%d deleted %d times, want at most once", i, n)
		}
	}
}
