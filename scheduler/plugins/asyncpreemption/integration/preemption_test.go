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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics/legacyregistry"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
)

func pod(name, class string, cpu string) *v1.Pod {
	p := st.MakePod().Namespace("default").Name(name).
		Req(map[v1.ResourceName]string{v1.ResourceCPU: cpu}).Obj()
	p.Spec.PriorityClassName = class
	// No kubelet here: a deleted pod is gone at once only without a grace period.
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	return p
}

func priorityClasses(t *testing.T, e *schedtest.Env) {
	t.Helper()
	for name, value := range map[string]int32{"low": 1, "high": 100} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func create(t *testing.T, e *schedtest.Env, p *v1.Pod) {
	t.Helper()
	if _, err := e.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) bool) time.Duration {
	t.Helper()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	}); err != nil {
		t.Fatalf("%s: not within %v", what, timeout)
	}
	return time.Since(start)
}

func (h helpers) scheduled(name string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		p, err := h.e.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != ""
	}
}

type helpers struct{ e *schedtest.Env }

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
	e := schedtest.Setup(t)
	e.CreateNodes(1, "4")
	priorityClasses(t, e)
	e.StartScheduler(schedtest.GantryProfile)
	h := helpers{e}
	for i := range 4 {
		create(t, e, pod(fmt.Sprintf("low-%d", i), "low", "1"))
	}
	for i := range 4 {
		waitFor(t, "low pods scheduled", 30*time.Second, h.scheduled(fmt.Sprintf("low-%d", i)))
	}
	errorsBefore := counter(t, "gantry_preemption_goroutine_executions_total", "result", "error")

	e.Faults.Fail(http.MethodDelete, "/pods/low-", http.StatusInternalServerError)
	create(t, e, pod("high", "high", "2"))

	// The failure clears status.nominatedNodeName (it was set when the
	// preemption started).
	waitFor(t, "preemption failure recorded", 30*time.Second, func(ctx context.Context) bool {
		return counter(t, "gantry_preemption_goroutine_executions_total", "result", "error") > errorsBefore
	})
	waitFor(t, "nomination cleared", 10*time.Second, func(ctx context.Context) bool {
		p, err := e.Client.CoreV1().Pods("default").Get(ctx, "high", metav1.GetOptions{})
		return err == nil && p.Status.NominatedNodeName == "" && p.Spec.NodeName == ""
	})

	// Deletes work again: the retry (after a backoff of seconds, not the
	// five-minute flush) preempts and the preemptor runs.
	before := map[int]int{}
	for i := range 4 {
		before[i] = e.Faults.Count(http.MethodDelete, fmt.Sprintf("/api/v1/namespaces/default/pods/low-%d", i))
	}
	e.Faults.Clear()
	took := waitFor(t, "preemptor scheduled after deletes recovered", 60*time.Second, h.scheduled("high"))
	t.Logf("preemptor scheduled %v after deletes recovered", took.Round(100*time.Millisecond))

	if left := h.lowLeft(t); left != 2 {
		t.Errorf("%d low-priority pods left, want 2 (2 CPU freed for the 2-CPU preemptor)", left)
	}
	h.expectDeletedAtMostOnce(t, before)
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
			e := schedtest.Setup(t)
			e.CreateNodes(1, "4")
			priorityClasses(t, e)
			for name, value := range map[string]int32{"medium": 50, "higher": 200} {
				pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
				if _, err := e.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			e.StartScheduler(schedtest.GantryProfile)
			h := helpers{e}
			for i := range 4 {
				create(t, e, pod(fmt.Sprintf("low-%d", i), "low", "1"))
			}
			for i := range 4 {
				waitFor(t, "low pods scheduled", 30*time.Second, h.scheduled(fmt.Sprintf("low-%d", i)))
			}
			e.Faults.Delay(http.MethodDelete, "/pods/low-", 2*time.Second)
			create(t, e, pod("first", "high", "2"))
			waitFor(t, "first preemptor nominated", 10*time.Second, func(ctx context.Context) bool {
				p, err := e.Client.CoreV1().Pods("default").Get(ctx, "first", metav1.GetOptions{})
				return err == nil && p.Status.NominatedNodeName != ""
			})
			create(t, e, pod("second", tc.class, tc.cpu))

			waitFor(t, "first preemptor scheduled", 60*time.Second, h.scheduled("first"))
			waitFor(t, "second preemptor scheduled", 60*time.Second, h.scheduled("second"))
			if left := h.lowLeft(t); left != tc.wantLeft {
				t.Errorf("%d low-priority pods left, want %d", left, tc.wantLeft)
			}
			h.expectDeletedAtMostOnce(t, nil)
		})
	}
}

// TestPendingReservationPreempts: a pending reservation of higher priority
// than the running pods preempts room for itself, as a pod would, while its
// victims' deletes are slow. A non-preempting pod of lower priority than
// the reservation, created meanwhile, must not take the room the victims
// free: the reservation is nominated there.
func TestPendingReservationPreempts(t *testing.T) {
	e := schedtest.Setup(t)
	e.CreateNodes(1, "4")
	priorityClasses(t, e)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "medium-never"}, Value: 50,
		PreemptionPolicy: ptr.To(v1.PreemptNever)}
	if _, err := e.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.StartScheduler(schedtest.GantryProfile)
	h := helpers{e}
	for i := range 4 {
		create(t, e, pod(fmt.Sprintf("low-%d", i), "low", "1"))
	}
	for i := range 4 {
		waitFor(t, "low pods scheduled", 30*time.Second, h.scheduled(fmt.Sprintf("low-%d", i)))
	}
	e.Faults.Delay(http.MethodDelete, "/pods/low-", 2*time.Second)
	r := &schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: schedv1alpha1.ReservationSpec{
			Template: schedv1alpha1.ReservationTemplate{
				Requests:      v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")},
				Priority:      ptr.To[int32](100),
				SchedulerName: v1.DefaultSchedulerName,
			},
			Owners: []schedv1alpha1.ReservationOwner{{Object: &schedv1alpha1.OwnerReference{Namespace: "default", Name: "someone"}}},
		},
	}
	if _, err := e.Gantry.SchedulingV1alpha1().Reservations().Create(context.Background(), r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first victim delete sent", 10*time.Second, func(context.Context) bool {
		for i := range 4 {
			if e.Faults.Count(http.MethodDelete, fmt.Sprintf("/api/v1/namespaces/default/pods/low-%d", i)) > 0 {
				return true
			}
		}
		return false
	})
	create(t, e, pod("intruder", "medium-never", "1"))

	waitFor(t, "reservation Available", 60*time.Second, func(ctx context.Context) bool {
		got, err := e.Gantry.SchedulingV1alpha1().Reservations().Get(ctx, "big", metav1.GetOptions{})
		return err == nil && got.Status.Phase == schedv1alpha1.ReservationAvailable && got.Status.NodeName != ""
	})
	// The intruder had every chance to land while the victims left.
	time.Sleep(2 * time.Second)
	in, err := e.Client.CoreV1().Pods("default").Get(context.Background(), "intruder", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.NodeName != "" {
		t.Errorf("the non-preempting intruder took room preempted for the reservation (node %s)", in.Spec.NodeName)
	}
	if left := h.lowLeft(t); left != 2 {
		t.Errorf("%d low-priority pods left, want 2 (2 CPU preempted for the reservation)", left)
	}
	h.expectDeletedAtMostOnce(t, nil)
}

// lowLeft is how many low-priority pods ("low-…") exist.
func (h helpers) lowLeft(t *testing.T) int {
	t.Helper()
	pods, err := h.e.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
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
func (h helpers) expectDeletedAtMostOnce(t *testing.T, before map[int]int) {
	t.Helper()
	for i := range 4 {
		if n := h.e.Faults.Count(http.MethodDelete, fmt.Sprintf("/api/v1/namespaces/default/pods/low-%d", i)) - before[i]; n > 1 {
			t.Errorf("low-%d deleted %d times, want at most once", i, n)
		}
	}
}
