//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// setupGangs is setup with gang scheduling on in kube-apiserver and in this
// process's scheduler, which then runs upstream's gang plugins (they join
// the default plugins with the gate).
func setupGangs(t *testing.T) *env {
	e := &env{Env: schedtest.SetupWithArgs(t, schedtest.EnableGangs(t)...), t: t}
	e.CreateNodes(3, "4")
	return e
}

// createGang creates a PodGroup that is placed all or nothing (a gang of
// minCount members), and its members: pods of cpu each, labelled app=app.
func (e *env) createGang(name string, members int, cpu, app string) {
	e.t.Helper()
	ctx := context.Background()
	pg := wrappers.MakePodGroup(name, "default", int32(members)).Obj()
	if _, err := e.Client.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	for i := range members {
		p := wrappers.MakePod(fmt.Sprintf("%s-%d", name, i), "default").Label("app", app).Requests("cpu", cpu).PodGroup(name).Obj()
		if _, err := e.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestGangInReservation: a gang whose members own a reservation is placed
// all in it; a gang that fits only in part is not placed at all, and the
// reservation it would have used keeps its whole capacity: the ledger holds
// nothing for a gang that was not placed.
func TestGangInReservation(t *testing.T) {
	e := setupGangs(t)
	ctx := context.Background()
	rs := e.startScheduler()
	pods := e.Client.CoreV1().Pods("default")

	createAvailable(t, e,
		wrappers.MakeReservation("r", "cpu", "3").OwnerLabels("default", map[string]string{"app": "gang"}).
			AllocateOnce(false).NodeName("node-1").Obj(),
		wrappers.MakeReservation("r2", "cpu", "4").OwnerLabels("default", map[string]string{"app": "big"}).
			AllocateOnce(false).NodeName("node-2").Obj())

	// Three members of 1 CPU: the reservation holds them all.
	e.createGang("gang", 3, "1", "gang")
	for i := range 3 {
		name := fmt.Sprintf("gang-%d", i)
		got := waitBound(t, pods, name)
		var alloc schedv1alpha1.ReservationAllocation
		if got.Spec.NodeName != "node-1" || jsonUnmarshal(got.Annotations[schedv1alpha1.AnnotationAllocated], &alloc) != nil || alloc.Name != "r" {
			t.Errorf("%s was bound to %s with allocation %q; want node-1, in reservation r", name, got.Spec.NodeName, got.Annotations[schedv1alpha1.AnnotationAllocated])
		}
	}
	e.settle(rs, "gang placed")

	// Three members of 3 CPU: one fits in r2 on node-2, one on node-0, none
	// on node-1 (1 CPU left). The gang is not placed, and r2 keeps its 4 CPU.
	e.createGang("big", 3, "3", "big")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=big"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				t.Fatalf("%s of a gang that cannot be placed whole was bound to %s", p.Name, p.Spec.NodeName)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	r2, err := e.Gantry.SchedulingV1alpha1().Reservations().Get(ctx, "r2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Status.Phase != schedv1alpha1.ReservationAvailable || len(r2.Status.CurrentOwners) != 0 {
		t.Errorf("r2 is %s with owners %v; want Available and unused", r2.Status.Phase, r2.Status.CurrentOwners)
	}
	e.settle(rs, "gang refused")
	if got := cacheCPU(rs)["node-2"]; got != 4000 {
		t.Errorf("node-2 holds %dm CPU in the scheduler's cache, want r2's 4000m", got)
	}
	if c := e.podGroupScheduled("big"); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("PodGroup big's %s condition is %+v; want False", scheduledCondition, c)
	}
	if c := e.podGroupScheduled("gang"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("PodGroup gang's %s condition is %+v; want True", scheduledCondition, c)
	}
}

// scheduledCondition is the condition the scheduler writes on a PodGroup
// once it has tried to place it.
const scheduledCondition = schedulingv1beta1.PodGroupInitiallyScheduled

func (e *env) podGroupScheduled(name string) *metav1.Condition {
	e.t.Helper()
	pg, err := e.Client.SchedulingV1beta1().PodGroups("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i, c := range pg.Status.Conditions {
		if c.Type == scheduledCondition {
			return &pg.Status.Conditions[i]
		}
	}
	return nil
}
