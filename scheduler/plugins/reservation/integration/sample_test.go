//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/component-base/metrics/legacyregistry"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// sampleNodes is more nodes than the scheduler filters for one pod: it stops
// at 100 feasible nodes (upstream's minimum) in a cluster of empty ones.
const sampleNodes = 250

// TestOwnerFindsItsReservationOutsideTheSample: in a cluster larger than the
// scheduler's sample of nodes, each owner pod still lands in its own
// reservation, wherever that is; and an owner that cannot use its
// reservation's node goes elsewhere, preempting nothing and consuming
// nothing. Without the node hint each owner would find its reservation with
// a chance of about 100/250, all eight with one of about 7 in 10,000.
func TestOwnerFindsItsReservationOutsideTheSample(t *testing.T) {
	e := &env{Env: schedtest.Setup(t), t: t}
	e.CreateNodes(sampleNodes, "4")
	ctx := context.Background()
	rs := e.startScheduler()
	rsv := e.Gantry.SchedulingV1alpha1().Reservations()
	pods := e.Client.CoreV1().Pods("default")

	const owners = 8
	nodeOf := func(i int) string { return fmt.Sprintf("node-%d", (i*71+13)%sampleNodes) }
	var reservations []*schedv1alpha1.Reservation
	for i := range owners + 1 {
		reservations = append(reservations, wrappers.MakeReservation(fmt.Sprintf("r-%d", i), "cpu", "1").
			OwnerPod("default", fmt.Sprintf("owner-%d", i)).AllocateOnce(true).NodeName(nodeOf(i)).Obj())
	}
	createAvailable(t, e, reservations...)

	usedBefore, elsewhereBefore := ownerHints(t, "used"), ownerHints(t, "elsewhere")
	// One at a time, so that each owner's cycle starts its sample where the
	// last one stopped, as in a busy scheduler.
	for i := range owners {
		name := fmt.Sprintf("owner-%d", i)
		if _, err := pods.Create(ctx, wrappers.MakePod(name, "default").Requests("cpu", "1").Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitBound(t, pods, name)
		if got.Spec.NodeName != nodeOf(i) {
			t.Errorf("%s was bound to %s, not to its reservation's node %s", name, got.Spec.NodeName, nodeOf(i))
			continue
		}
		var alloc schedv1alpha1.ReservationAllocation
		if err := jsonUnmarshal(got.Annotations[schedv1alpha1.AnnotationAllocated], &alloc); err != nil || alloc.Name != fmt.Sprintf("r-%d", i) {
			t.Errorf("%s is on its reservation's node but its allocation is %q (%v)", name, got.Annotations[schedv1alpha1.AnnotationAllocated], err)
		}
	}

	if got := ownerHints(t, "used") - usedBefore; got < owners {
		t.Errorf("gantry_reservation_owner_hints_total{result=used} rose by %v, want at least %d", got, owners)
	}

	// The last reservation's node is tainted after it was placed: its owner
	// fails there and must be scheduled like any pod, on another node,
	// without consuming the reservation or preempting anyone.
	last := fmt.Sprintf("owner-%d", owners)
	n, err := e.Client.CoreV1().Nodes().Get(ctx, nodeOf(owners), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "gantry.dev/test", Effect: v1.TaintEffectNoSchedule})
	if _, err := e.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait for the scheduler to see the taint: a cycle on a stale node would
	// still place the owner in its reservation.
	util.Must(t).Poll(ctx, util.LongTimeout, "the scheduler sees the taint", func(context.Context) (bool, error) {
		ni, err := rs.Sched.Cache.GetNode(nodeOf(owners))
		return err == nil && len(ni.Node().Spec.Taints) > 0, err
	})
	if _, err := pods.Create(ctx, wrappers.MakePod(last, "default").Requests("cpu", "1").Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitBound(t, pods, last)
	if got.Spec.NodeName == nodeOf(owners) || got.Annotations[schedv1alpha1.AnnotationAllocated] != "" {
		t.Errorf("%s was bound to %s with allocation %q; want another node and no allocation", last, got.Spec.NodeName, got.Annotations[schedv1alpha1.AnnotationAllocated])
	}
	if got := ownerHints(t, "elsewhere") - elsewhereBefore; got < 1 {
		t.Errorf("gantry_reservation_owner_hints_total{result=elsewhere} rose by %v, want at least 1", got)
	}
	r, err := rsv.Get(ctx, fmt.Sprintf("r-%d", owners), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status.Phase != schedv1alpha1.ReservationAvailable || len(r.Status.CurrentOwners) != 0 {
		t.Errorf("the reservation its owner could not use is %s with owners %v; want Available, unused", r.Status.Phase, r.Status.CurrentOwners)
	}
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != owners+1 {
		t.Errorf("%d pods in default, want %d: something was preempted", len(list.Items), owners+1)
	}
}

// createAvailable creates the reservations and waits until all of them
// are Available.
func createAvailable(t *testing.T, e *env, rs ...*schedv1alpha1.Reservation) {
	t.Helper()
	ctx := context.Background()
	client := e.Gantry.SchedulingV1alpha1().Reservations()
	for _, r := range rs {
		if _, err := client.Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	util.Must(t).Poll(ctx, util.LongTimeout, "reservations Available", func(ctx context.Context) (bool, error) {
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, r := range list.Items {
			if r.Status.Phase != schedv1alpha1.ReservationAvailable {
				return false, fmt.Errorf("%s is %s", r.Name, r.Status.Phase)
			}
		}
		return len(list.Items) == len(rs), nil
	})
}

// ownerHints reads gantry_reservation_owner_hints_total{result} from the
// process's registry, where the scheduler under test registers it; 0 before
// the plugin has counted a hint of that result.
func ownerHints(t *testing.T, result string) float64 {
	t.Helper()
	v, _, err := util.MetricValue(legacyregistry.DefaultGatherer, "gantry_reservation_owner_hints_total", map[string]string{"result": result})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitBound waits until pod name is bound, and returns it.
func waitBound(t *testing.T, pods corev1client.PodInterface, name string) *v1.Pod {
	t.Helper()
	var got *v1.Pod
	util.Must(t).Poll(context.Background(), util.LongTimeout, name+" bound", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		got = p
		return err == nil && p.Spec.NodeName != "", err
	})
	return got
}

// batchable is pluginConfig that lets the default plugins sign pods.
const batchable = `  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
`

// TestBatchedOwnersStayInTheirReservations: owners of the same
// reservations share a batching signature and come one after another. Two
// reservations of 1 CPU on one node, owners of 2 CPU: none holds an owner
// whole, so no owner is hinted to them and each goes through a full cycle,
// which upstream's batching keeps for the next. The second owner must still
// land in the second reservation. Upstream's batching would hint it off:
// it checks and re-scores the node it last chose without the filter hook,
// which sees that node as the owner does not (the reservation counted as
// taken, its score lost), and ranks the empty nodes first.
func TestBatchedOwnersStayInTheirReservations(t *testing.T) {
	e := &env{Env: schedtest.Setup(t), t: t}
	e.CreateNodes(3, "8")
	ctx := context.Background()
	// PodTopologySpread signs no pod while it has default constraints
	// (upstream's default): without them, pods are batched.
	e.StartScheduler(schedtest.GantryProfile + batchable)
	pods := e.Client.CoreV1().Pods("default")

	var rs []*schedv1alpha1.Reservation
	for _, name := range []string{"r-a", "r-b"} {
		rs = append(rs, wrappers.MakeReservation(name, "cpu", "1").
			OwnerLabels("default", map[string]string{"app": "owner"}).AllocateOnce(true).NodeName("node-1").Obj())
	}
	createAvailable(t, e, rs...)
	want := map[string]string{"owner-0": "r-a", "owner-1": "r-b"}
	for _, name := range []string{"owner-0", "owner-1"} {
		if _, err := pods.Create(ctx, ownerPod(name, "2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, r := range want {
		got := waitBound(t, pods, name)
		var alloc schedv1alpha1.ReservationAllocation
		if got.Spec.NodeName != "node-1" || jsonUnmarshal(got.Annotations[schedv1alpha1.AnnotationAllocated], &alloc) != nil || alloc.Name != r {
			t.Errorf("%s was bound to %s with allocation %q; want node-1, in reservation %s", name, got.Spec.NodeName, got.Annotations[schedv1alpha1.AnnotationAllocated], r)
		}
	}
}
