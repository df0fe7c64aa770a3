//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// setupGangs is setup with gang scheduling (GenericWorkload) on in
// kube-apiserver, which then serves PodGroups, and in this process's
// scheduler.
func setupGangs(t *testing.T) *env {
	return setupWithArgs(t, schedtest.EnableGangs(t))
}

// gang creates a PodGroup of class high placed all or nothing, and its
// members: pods of class high asking cpu each.
func (e *env) gang(name string, members int, cpu string) {
	e.t.Helper()
	pg := wrappers.MakePodGroup(name, "default", int32(members)).PriorityClass("high").Obj()
	created, err := e.Client.SchedulingV1beta1().PodGroups("default").Create(context.Background(), pg, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if created.Spec.Priority == nil || *created.Spec.Priority != 100 {
		e.t.Fatalf("PodGroup %s has priority %v, want class high's 100", name, created.Spec.Priority)
	}
	for i := range members {
		e.create(wrappers.MakePod(fmt.Sprintf("%s-%d", name, i), "default").Requests("cpu", cpu).
			PriorityClass("high").NoGrace().PodGroup(name).Obj())
	}
}

// TestGangPreemption: a gang of higher priority preempts what it needs, and
// only once all its members fit; a gang that would not fit even with every
// lower-priority pod gone preempts nothing (never for half a gang).
func TestGangPreemption(t *testing.T) {
	e := setupGangs(t)
	before := e.lowDeletes()

	// Two members of 3 CPU on one node of 4: no placement holds both, even
	// with the node empty. Nothing is deleted.
	e.gang("toobig", 2, "3")
	time.Sleep(5 * time.Second)
	if left := e.lowLeft(); left != 4 {
		t.Fatalf("%d low-priority pods left after a gang that cannot fit whole, want all 4", left)
	}

	// Two members of 1 CPU: two low pods are preempted, both members bound.
	e.gang("fits", 2, "1")
	for i := range 2 {
		e.waitScheduled(fmt.Sprintf("fits-%d", i), util.LongTimeout)
	}
	if left := e.lowLeft(); left != 2 {
		t.Errorf("%d low-priority pods left, want 2 (2 CPU preempted for the gang)", left)
	}
	e.expectDeletedAtMostOnce(before)
	if n := counter(t, "gantry_preemption_pod_group_attempts_total"); n == 0 {
		t.Error("gantry_preemption_pod_group_attempts_total did not count the gangs' preemptions")
	}
}
