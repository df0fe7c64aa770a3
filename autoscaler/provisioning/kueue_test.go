package provisioning

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// kueueWorkload is a Workload of namespace ns, evicted for reason when
// reason is not "".
func kueueWorkload(name, ns string, uid types.UID, reason string) *unstructured.Unstructured {
	wl := newWorkload()
	wl.SetName(name)
	wl.SetNamespace(ns)
	wl.SetUID(uid)
	_ = unstructured.SetNestedField(wl.Object, map[string]any{"podSets": []any{map[string]any{"name": "main", "count": int64(2)}}}, "spec")
	if reason != "" {
		_ = unstructured.SetNestedSlice(wl.Object, []any{map[string]any{
			"type": "Evicted", "status": "True", "reason": reason, "message": "Preempted to accommodate a workload (UID: x) due to prioritization in the ClusterQueue",
			"lastTransitionTime": "2026-11-28T00:00:00Z",
		}}, "status", "conditions")
	}
	return wl
}

// TestEvictedWorkloadReleasesItsBooking: the booking of a Provisioned
// request whose controller, a Kueue Workload, was evicted before its pods
// came ends BookingExpired, reason WorkloadEvicted, and its Reservations
// are released. A Workload that is not evicted, one whose UID is not the
// one the request's owner reference names (a forged or replaced owner), an
// owner that is not the controller, and Kueue's API not being watched
// leave the booking alone. Before the change nothing read the Workload,
// and the booking was held until it expired.
func TestEvictedWorkloadReleasesItsBooking(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		reason     string
		wlUID      types.UID
		controller bool
		unwatched  bool
		wantEnd    bool
	}{
		{name: "evicted", reason: "Preempted", wlUID: "wl-1", controller: true, wantEnd: true},
		{name: "admitted", wlUID: "wl-1", controller: true},
		{name: "another Workload of the same name", reason: "Preempted", wlUID: "wl-2", controller: true},
		{name: "owner, not controller", reason: "Preempted", wlUID: "wl-1"},
		{name: "Kueue's API not watched", reason: "Preempted", wlUID: "wl-1", controller: true, unwatched: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := wrappers.MakeProvisioningRequest("job-wl-check-1", "ns", provv1.ClassCheckCapacity).UID("uid-1").PodSet("tmpl", 2).Obj()
			pr.Finalizers = []string{Finalizer}
			pr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kueue.x-k8s.io/v1beta2", Kind: "Workload", Name: "job-wl", UID: "wl-1", Controller: ptr.To(tc.controller)}}
			meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: provv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: provv1.ReasonCapacityIsFound})
			res := booking(bookingName(pr.UID, 0, 0), pr)
			res.Annotations[AnnotationBookedPods] = "2"
			res.Status.Phase, res.Status.NodeName = schedv1alpha1.ReservationAvailable, "n1"
			r, c := fakeReconciler(t, time.Now(), pr, res, kueueWorkload("job-wl", "ns", tc.wlUID, tc.reason))
			if !tc.unwatched {
				r.kueue.workloads.Store(client.Reader(c))
			}
			got := watchBookingOnce(t, r, c, pr)
			cond := meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionBookingExpired)
			left := &schedv1alpha1.ReservationList{}
			if err := c.List(ctx, left); err != nil {
				t.Fatal(err)
			}
			if !tc.wantEnd {
				if cond != nil || len(left.Items) != 1 {
					t.Errorf("BookingExpired %+v, %d Reservations; want the booking held", cond, len(left.Items))
				}
				return
			}
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonWorkloadEvicted ||
				!strings.Contains(cond.Message, "Kueue evicted workload job-wl: Preempted") || !strings.Contains(cond.Message, "2 pods") {
				t.Errorf("BookingExpired %+v, want True, WorkloadEvicted, naming the workload, Kueue's reason and the 2 pods", cond)
			}
			if len(left.Items) != 0 {
				t.Errorf("%d Reservations left, want none", len(left.Items))
			}
		})
	}
}

// TestEvictedWorkloadWakesItsRequests: the Workload controller wakes the
// requests the evicted Workload controls, and none other of its namespace.
func TestEvictedWorkloadWakesItsRequests(t *testing.T) {
	owned := wrappers.MakeProvisioningRequest("job-wl-check-1", "ns", provv1.ClassCheckCapacity).UID("uid-1").Obj()
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kueue.x-k8s.io/v1beta2", Kind: "Workload", Name: "job-wl", UID: "wl-1", Controller: ptr.To(true)}}
	other := wrappers.MakeProvisioningRequest("other", "ns", provv1.ClassCheckCapacity).UID("uid-2").Obj()
	r, c := fakeReconciler(t, time.Now(), owned, other, kueueWorkload("job-wl", "ns", "wl-1", "Preempted"))
	r.kueue.workloads.Store(client.Reader(c))
	if _, err := r.wakeRequestsOfWorkload(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "job-wl"}}); err != nil {
		t.Fatal(err)
	}
	var woken []string
	for len(r.kueue.channel()) > 0 {
		woken = append(woken, (<-r.kueue.channel()).Object.Name)
	}
	if len(woken) != 1 || woken[0] != owned.Name {
		t.Errorf("woke %v, want [%s]", woken, owned.Name)
	}
}

// TestStripWorkload: the cache keeps a Workload's metadata, priority class
// and conditions, not its pod templates.
func TestStripWorkload(t *testing.T) {
	wl := kueueWorkload("job-wl", "ns", "wl-1", "Preempted")
	wl.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kueue"}})
	_ = unstructured.SetNestedMap(wl.Object, map[string]any{"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}, "spec", "priorityClassRef")
	out, err := stripWorkload(wl)
	if err != nil {
		t.Fatal(err)
	}
	u := out.(*unstructured.Unstructured)
	if spec, _, _ := unstructured.NestedMap(u.Object, "spec"); len(spec) != 1 || spec["priorityClassRef"] == nil {
		t.Errorf("spec %v, want its priorityClassRef only", spec)
	}
	if u.GetName() != "job-wl" || u.GetUID() != "wl-1" || len(u.GetManagedFields()) != 0 {
		t.Errorf("metadata %v, want the name and UID without managed fields", u.Object["metadata"])
	}
	if workloadEvicted(u) == "" {
		t.Error("the Evicted condition was dropped")
	}
}

// TestWorkloadPriority: a Kueue workload's booking takes the value of its
// WorkloadPriorityClass, at most the highest a user may define; a workload
// with a pod PriorityClass, a missing class, or none watched leaves the
// pods' own priority.
func TestWorkloadPriority(t *testing.T) {
	ctx := context.Background()
	wpc := func(name string, value int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"value": value}}
		u.SetGroupVersionKind(workloadPriorityClassGVK)
		u.SetName(name)
		return u
	}
	for _, tc := range []struct {
		name      string
		ref       map[string]any
		unwatched bool
		want      int32
		wantOK    bool
	}{
		{name: "workload priority class", ref: map[string]any{"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}, want: 5000, wantOK: true},
		{name: "above what a user may define", ref: map[string]any{"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "huge"}, want: 1000000000, wantOK: true},
		{name: "pod priority class", ref: map[string]any{"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}},
		{name: "class missing", ref: map[string]any{"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "gone"}},
		{name: "no class"},
		{name: "Kueue's API not watched", ref: map[string]any{"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}, unwatched: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := wrappers.MakeProvisioningRequest("job-wl-check-1", "ns", provv1.ClassCheckCapacity).UID("uid-1").Obj()
			pr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kueue.x-k8s.io/v1beta2", Kind: "Workload", Name: "job-wl", UID: "wl-1", Controller: ptr.To(true)}}
			wl := kueueWorkload("job-wl", "ns", "wl-1", "")
			if tc.ref != nil {
				_ = unstructured.SetNestedMap(wl.Object, tc.ref, "spec", "priorityClassRef")
			}
			r, c := fakeReconciler(t, time.Now(), pr, wl, wpc("high", 5000), wpc("huge", 2000000000))
			if !tc.unwatched {
				r.kueue.workloads.Store(client.Reader(c))
			}
			got, ok := r.workloadPriority(ctx, pr)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("workloadPriority = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
