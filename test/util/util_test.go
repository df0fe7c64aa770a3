package util

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	gantryfake "github.com/gantry-dev/gantry/crds/client/clientset/versioned/fake"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestPoll(t *testing.T) {
	ctx := context.Background()
	calls := 0
	if err := Poll(ctx, time.Second, "third call", func(context.Context) (bool, error) {
		calls++
		return calls == 3, nil
	}); err != nil || calls != 3 {
		t.Errorf("Poll = %v after %d calls, want nil after 3", err, calls)
	}

	err := Poll(ctx, 3*Interval, "the answer", func(context.Context) (bool, error) {
		calls++
		return false, fmt.Errorf("saw %d", calls)
	})
	if err == nil {
		t.Fatal("Poll of a condition that never holds returned nil")
	}
	for _, want := range []string{"the answer", "not within 300ms", fmt.Sprintf("last seen: saw %d", calls)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := Poll(cancelled, time.Minute, "anything", func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Poll on a cancelled context = %v, want context.Canceled", err)
	}
}

func TestWaitForPodReturnsLastState(t *testing.T) {
	ctx := context.Background()
	pending := wrappers.MakePod("p", "default").NominatedNodeName("n1").Obj()
	c := fake.NewClientset(pending)

	got, err := WaitForPod(ctx, 3*Interval, c, "default", "p", "scheduled", PodScheduled)
	if err == nil {
		t.Fatal("WaitForPod of a pending pod returned nil")
	}
	if got == nil || got.Status.NominatedNodeName != "n1" {
		t.Errorf("last pod %v, want the pending pod", got)
	}
	for _, want := range []string{"pod default/p scheduled", `node ""`, `nominated to "n1"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	if _, err := WaitForPod(ctx, 3*Interval, c, "default", "missing", "scheduled", PodScheduled); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("WaitForPod of a missing pod: %v, want the get error as last state", err)
	}

	bound := pending.DeepCopy()
	bound.Spec.NodeName = "n1"
	if _, err := c.CoreV1().Pods("default").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := WaitForPod(ctx, time.Second, c, "default", "p", "scheduled", PodScheduled); err != nil || got.Spec.NodeName != "n1" {
		t.Errorf("WaitForPod of a bound pod = %v, %v", got, err)
	}
}

func TestWaitForProvisioningRequestCondition(t *testing.T) {
	ctx := context.Background()
	pr := wrappers.MakeProvisioningRequest("r", "default", provv1.ClassCheckCapacity).PodSet("workers", 1).Obj()
	pr.Status.Conditions = []metav1.Condition{{Type: provv1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: "Booking", Message: "waiting"}}
	c := gantryfake.NewSimpleClientset(pr)

	for name, tc := range map[string]struct {
		status  metav1.ConditionStatus
		reason  string
		wantErr string
	}{
		"status and reason":  {status: metav1.ConditionFalse, reason: "Booking"},
		"any reason":         {status: metav1.ConditionFalse},
		"other status":       {status: metav1.ConditionTrue, wantErr: "Provisioned=True: not within"},
		"other reason":       {status: metav1.ConditionFalse, reason: "ScalingUp", wantErr: "Provisioned=False (ScalingUp)"},
		"last state in text": {status: metav1.ConditionTrue, reason: "CapacityIsFound", wantErr: "Provisioned=False (Booking: waiting)"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := WaitForProvisioningRequestCondition(ctx, 3*Interval, c, "default", "r", provv1.ConditionProvisioned, tc.status, tc.reason)
			if got == nil || got.Name != "r" {
				t.Errorf("last request %v, want r", got)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// fatalRecorder is a testing.TB whose Fatal records and stops the
// goroutine, as testing's does.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestMustFailsTheTest(t *testing.T) {
	r := &fatalRecorder{TB: t}
	returned := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		Must(r).Until(context.Background(), 2*Interval, "never", func(context.Context) bool { return false })
		returned = true
	}()
	<-done
	if returned || !strings.Contains(r.fatal, "never: not within") {
		t.Errorf("Must(t).Until of a condition that never holds: returned %v, Fatal(%q)", returned, r.fatal)
	}

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: v1.PodSpec{NodeName: "n"}}
	if got := Must(t).WaitForPod(context.Background(), time.Second, fake.NewClientset(pod), "default", "p", "scheduled", PodScheduled); got.Spec.NodeName != "n" {
		t.Errorf("Must(t).WaitForPod = %v", got)
	}
}

func TestMetricValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	hints := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hints_total"}, []string{"result"})
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "up"})
	reg.MustRegister(hints, up)
	up.Set(3)

	if v, found, err := MetricValue(reg, "hints_total", map[string]string{"result": "used"}); err != nil || found || v != 0 {
		t.Errorf("a vector that counted nothing: %v, %v, %v; want 0, not found", v, found, err)
	}
	hints.WithLabelValues("used").Add(2)
	hints.WithLabelValues("elsewhere").Inc()
	if v, found, err := MetricValue(reg, "hints_total", map[string]string{"result": "used"}); err != nil || !found || v != 2 {
		t.Errorf("hints_total{result=used} = %v, %v, %v; want 2", v, found, err)
	}
	if _, _, err := MetricValue(reg, "hints_total", nil); err == nil {
		t.Error("two series and no labels: want an error, not one of them")
	}
	if v, found, err := MetricValue(reg, "up", nil); err != nil || !found || v != 3 {
		t.Errorf("up = %v, %v, %v; want 3", v, found, err)
	}
	if _, found, err := MetricValue(reg, "renamed", nil); err != nil || found {
		t.Errorf("a missing metric: found %v, %v", found, err)
	}
}
