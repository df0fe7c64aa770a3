package provisioning

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// boundInto is a pod of namespace the scheduler bound into res on node,
// consuming the request named consume, finished.
func boundInto(t *testing.T, name, namespace, node, consume string, res *schedv1alpha1.Reservation) *v1.Pod {
	t.Helper()
	alloc, err := json.Marshal(schedv1alpha1.ReservationAllocation{Name: res.Name, UID: res.UID})
	if err != nil {
		t.Fatal(err)
	}
	return wrappers.MakePod(name, namespace).UID("pod-"+namespace+"-"+name).NodeName(node).
		Annotation(provv1.AnnotationConsume, consume).Annotation(schedv1alpha1.AnnotationAllocated, string(alloc)).
		Phase(v1.PodSucceeded).Obj()
}

// TestBookingEndsWhenItsPodsFinishedFirst reproduces the fast-pod race: a
// booking of 3 pods on one node whose pods were bound into it and finished
// before the scheduler's status controller saw them running, so that its
// status records 1 owner. Once the third pod came, the request ends
// BookingExpired, reason CapacityBookingConsumed, and its Reservation is
// released. Pods that are not the request's own (another namespace, another
// request, another node) do not count, whatever their allocation says.
// Before the fix the request counted only the recorded owner and stayed
// Provisioned, holding the room until the booking expired.
func TestBookingEndsWhenItsPodsFinishedFirst(t *testing.T) {
	ctx := context.Background()
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").PodSet("tmpl", 3).Obj()
	pr.Finalizers = []string{Finalizer}
	meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: provv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: provv1.ReasonCapacityIsFound})
	res := booking(bookingName(pr.UID, 0, 0), pr)
	res.UID = "res-1"
	res.Annotations[AnnotationBookedPods] = "3"
	res.Status.Phase, res.Status.NodeName = schedv1alpha1.ReservationAvailable, "n1"
	first := boundInto(t, "p0", "ns", "n1", "job", res)
	res.Status.CurrentOwners = []v1.ObjectReference{{Kind: "Pod", Namespace: "ns", Name: first.Name, UID: first.UID}}

	r, c := fakeReconciler(t, time.Now(), pr, res)
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Pod{}, 0, PodIndexers())
	r.PodInformer = informer
	for _, p := range []*v1.Pod{
		first,
		boundInto(t, "p1", "ns", "n1", "job", res),
		boundInto(t, "intruder", "other", "n1", "job", res),
		boundInto(t, "other-request", "ns", "n1", "another", res),
		boundInto(t, "elsewhere", "ns", "n2", "job", res),
	} {
		if err := informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	serve := func() *provv1.ProvisioningRequest { return watchBookingOnce(t, r, c, pr) }

	if got := r.cameTo(res); got != 2 {
		t.Errorf("came to the booking: %d, want 2 (the recorded owner and p1)", got)
	}
	if got := serve(); meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionBookingExpired) != nil {
		t.Fatalf("ended with 2 of 3 pods come: %+v", got.Status.Conditions)
	}

	if err := informer.GetIndexer().Add(boundInto(t, "p2", "ns", "n1", "job", res)); err != nil {
		t.Fatal(err)
	}
	got := serve()
	cond := meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionBookingExpired)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonCapacityBookingConsumed || !strings.Contains(cond.Message, "all 3 pods") {
		t.Fatalf("BookingExpired %+v, want True, CapacityBookingConsumed, all 3 pods", cond)
	}
	left := &schedv1alpha1.ReservationList{}
	if err := c.List(ctx, left); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d Reservations left after the booking was consumed, want none", len(left.Items))
	}
}

// TestRequestOfBoundPod: a pod that has a node wakes the request it
// consumes, bound into a booking or not; a pod not bound, or consuming
// nothing, wakes none.
func TestRequestOfBoundPod(t *testing.T) {
	res := wrappers.MakeReservation("r").UID("res-1").Obj()
	bound := boundInto(t, "p", "ns", "n1", "job", res)
	if got := requestOfBoundPod(bound); len(got) != 1 || got[0].NamespacedName != (types.NamespacedName{Namespace: "ns", Name: "job"}) {
		t.Errorf("bound pod: %v, want ns/job", got)
	}
	legacy := bound.DeepCopy()
	delete(legacy.Annotations, provv1.AnnotationConsume)
	legacy.Annotations[provv1.AnnotationConsumeLegacy] = "old"
	if got := requestOfBoundPod(legacy); len(got) != 1 || got[0].Name != "old" {
		t.Errorf("legacy consume annotation: %v, want ns/old", got)
	}
	unbound := bound.DeepCopy()
	unbound.Spec.NodeName = ""
	unallocated := bound.DeepCopy()
	delete(unallocated.Annotations, schedv1alpha1.AnnotationAllocated)
	if got := requestOfBoundPod(unallocated); len(got) != 1 || got[0].Name != "job" {
		t.Errorf("pod bound outside a booking: %v, want ns/job", got)
	}
	consumesNothing := wrappers.MakePod("q", "ns").NodeName("n1").Annotation(schedv1alpha1.AnnotationAllocated, "{}").Obj()
	for name, p := range map[string]*v1.Pod{"unbound": unbound, "consumes nothing": consumesNothing} {
		if got := requestOfBoundPod(p); got != nil {
			t.Errorf("%s: %v, want none", name, got)
		}
	}
	huge := bound.DeepCopy()
	huge.Annotations[schedv1alpha1.AnnotationAllocated] = `{"uid":"res-1","name":"` + strings.Repeat("x", maxAllocationAnnotation) + `"}`
	if keys, _ := podBookingIndex(huge); keys != nil {
		t.Errorf("an oversized allocation annotation was indexed: %v", keys)
	}
}

// TestBookingEndsWhenItsPodsCameElsewhere: a booking of 3 pods on n1, one
// of whose pods came to it while two were bound to n2 outside it (Kueue's
// topology-aware scheduling gives pods a node of its choosing). Once the
// third pod is bound, the request ends BookingExpired, reason
// CapacityBookingConsumed, and the booking is released. A pod created
// before the request, or of another namespace, does not count.
func TestBookingEndsWhenItsPodsCameElsewhere(t *testing.T) {
	ctx := context.Background()
	created := metav1.NewTime(time.Now().Add(-time.Minute))
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").PodSet("tmpl", 3).Obj()
	pr.Finalizers = []string{Finalizer}
	pr.CreationTimestamp = created
	meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: provv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: provv1.ReasonCapacityIsFound})
	res := booking(bookingName(pr.UID, 0, 0), pr)
	res.UID = "res-1"
	res.Annotations[AnnotationBookedPods] = "3"
	res.Status.Phase, res.Status.NodeName = schedv1alpha1.ReservationAvailable, "n1"

	r, c := fakeReconciler(t, time.Now(), pr, res)
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Pod{}, 0, PodIndexers())
	r.PodInformer = informer
	elsewhere := func(name, namespace string, at time.Time) *v1.Pod {
		p := wrappers.MakePod(name, namespace).UID("pod-"+namespace+"-"+name).NodeName("n2").
			Annotation(provv1.AnnotationConsume, "job").Phase(v1.PodSucceeded).Obj()
		p.CreationTimestamp = metav1.NewTime(at)
		return p
	}
	in := boundInto(t, "p0", "ns", "n1", "job", res)
	in.CreationTimestamp = metav1.Now()
	for _, p := range []*v1.Pod{
		in,
		elsewhere("p1", "ns", time.Now()),
		elsewhere("earlier", "ns", created.Add(-time.Second)),
		elsewhere("intruder", "other", time.Now()),
	} {
		if err := informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := watchBookingOnce(t, r, c, pr); meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionBookingExpired) != nil {
		t.Fatalf("ended with 2 of 3 pods come: %+v", got.Status.Conditions)
	}
	if err := informer.GetIndexer().Add(elsewhere("p2", "ns", time.Now())); err != nil {
		t.Fatal(err)
	}
	got := watchBookingOnce(t, r, c, pr)
	cond := meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionBookingExpired)
	want := "all 3 pods of the request came: 1 to their booking, 2 to nodes outside it"
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonCapacityBookingConsumed || cond.Message != want {
		t.Fatalf("BookingExpired %+v, want True, CapacityBookingConsumed, %q", cond, want)
	}
	left := &schedv1alpha1.ReservationList{}
	if err := c.List(ctx, left); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d Reservations left after the booking was consumed, want none", len(left.Items))
	}
}

// watchBookingOnce runs watchBooking once on the check-capacity request pr
// as c holds it, and returns it as c holds it then.
func watchBookingOnce(t *testing.T, r *Reconciler, c client.Client, pr *provv1.ProvisioningRequest) *provv1.ProvisioningRequest {
	t.Helper()
	ctx := context.Background()
	got := &provv1.ProvisioningRequest{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pr), got); err != nil {
		t.Fatal(err)
	}
	rq := newRequest(got)
	rq.class, _ = builtinClass(provv1.ClassCheckCapacity)
	if _, err := r.watchBooking(ctx, rq); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pr), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestBookingEndsWhenItsReservationsAreGone: a Provisioned request whose
// Reservations are all gone (deleted, or removed after they ended while
// the provisioner was down) ends: consumed once its pods have all come,
// else CapacityRevoked. Before the fix it matched no case and stayed
// Provisioned for good. A booking the provisioner has just made, not in
// its cache yet, is not taken for gone.
func TestBookingEndsWhenItsReservationsAreGone(t *testing.T) {
	provisioned := func() *provv1.ProvisioningRequest {
		pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").PodSet("tmpl", 2).Obj()
		pr.Finalizers = []string{Finalizer}
		meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: provv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: provv1.ReasonCapacityIsFound})
		return pr
	}
	came := func(name string) *v1.Pod {
		return wrappers.MakePod(name, "ns").UID("pod-"+name).NodeName("n1").Annotation(provv1.AnnotationConsume, "job").Phase(v1.PodSucceeded).Obj()
	}
	for _, tc := range []struct {
		name       string
		pods       []*v1.Pod
		assumed    bool
		wantType   string
		wantReason string
	}{
		{name: "no pod came", wantType: provv1.ConditionCapacityRevoked, wantReason: ReasonCapacityRevoked},
		{name: "one of two pods came", pods: []*v1.Pod{came("p0")}, wantType: provv1.ConditionCapacityRevoked, wantReason: ReasonCapacityRevoked},
		{name: "every pod came", pods: []*v1.Pod{came("p0"), came("p1")}, wantType: provv1.ConditionBookingExpired, wantReason: ReasonCapacityBookingConsumed},
		{name: "a booking just made", assumed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := provisioned()
			r, c := fakeReconciler(t, time.Now(), pr)
			informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Pod{}, 0, PodIndexers())
			r.PodInformer = informer
			for _, p := range tc.pods {
				if err := informer.GetIndexer().Add(p); err != nil {
					t.Fatal(err)
				}
			}
			if tc.assumed {
				r.assume([]*schedv1alpha1.Reservation{booking(bookingName(pr.UID, 0, 0), pr)})
			}
			got := watchBookingOnce(t, r, c, pr)
			if tc.wantType == "" {
				if !meta.IsStatusConditionTrue(got.Status.Conditions, provv1.ConditionProvisioned) || len(got.Status.Conditions) != 1 {
					t.Fatalf("conditions %+v, want Provisioned only", got.Status.Conditions)
				}
				return
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, tc.wantType)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, "gone") {
				t.Fatalf("%s %+v, want True, %s, saying the Reservations are gone", tc.wantType, cond, tc.wantReason)
			}
		})
	}
}

// TestPodGroupBookingCame: a request naming a PodGroup (ParameterPodGroup)
// books Reservations its members own, and its members need no consume
// annotation: a member bound into the booking has come, a member bound
// elsewhere after the request was made came elsewhere (once, whatever else
// it names), and a bound member wakes every request naming its group; once
// all have come, the booking ends. Pods of another group or namespace
// count for nothing.
func TestPodGroupBookingCame(t *testing.T) {
	ctx := context.Background()
	created := metav1.NewTime(time.Now().Add(-time.Minute))
	pr := wrappers.MakeProvisioningRequest("gang", "ns", provv1.ClassCheckCapacity).UID("uid-1").PodSet("tmpl", 4).
		Parameter(ParameterPodGroup, "trainer").Obj()
	pr.Finalizers = []string{Finalizer}
	pr.CreationTimestamp = created
	meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: provv1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: provv1.ReasonCapacityIsFound})
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	res := bookingFor(pr, 0, 0, wrappers.MakePod("", "ns").Requests("cpu", "1").Obj(), "n1", 2, c)
	res.UID = "res-1"
	res.Status.Phase, res.Status.NodeName = schedv1alpha1.ReservationAvailable, "n1"
	other := wrappers.MakeProvisioningRequest("also", "ns", provv1.ClassCheckCapacity).UID("uid-2").PodSet("tmpl", 1).
		Parameter(ParameterPodGroup, "trainer").Obj()
	unrelated := wrappers.MakeProvisioningRequest("unrelated", "ns", provv1.ClassCheckCapacity).UID("uid-3").PodSet("tmpl", 1).
		Parameter(ParameterPodGroup, "other").Obj()

	r, cl := fakeReconciler(t, time.Now(), pr, res, other, unrelated)
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Pod{}, 0, PodIndexers())
	r.PodInformer = informer
	member := func(name, namespace, group, node string, into *schedv1alpha1.Reservation) *v1.Pod {
		w := wrappers.MakePod(name, namespace).UID("pod-" + namespace + "-" + name).PodGroup(group).NodeName(node).Phase(v1.PodRunning)
		if into != nil {
			alloc, err := json.Marshal(schedv1alpha1.ReservationAllocation{Name: into.Name, UID: into.UID})
			if err != nil {
				t.Fatal(err)
			}
			w = w.Annotation(schedv1alpha1.AnnotationAllocated, string(alloc))
		}
		p := w.Obj()
		p.CreationTimestamp = metav1.Now()
		return p
	}
	// A member that consumes the request too, bound elsewhere.
	both := member("both", "ns", "trainer", "n2", nil)
	both.Annotations = map[string]string{provv1.AnnotationConsume: "gang"}
	for _, p := range []*v1.Pod{
		member("m0", "ns", "trainer", "n1", res),
		member("stranger", "ns", "other", "n1", res),
		member("intruder", "elsewhere", "trainer", "n1", res),
		member("off-node", "ns", "trainer", "n3", res),
		both,
	} {
		if err := informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.cameTo(res); got != 1 {
		t.Errorf("came to the booking: %d, want 1 (m0)", got)
	}
	// off-node names the booking in a forged allocation off its node: it
	// counts nowhere. both, listed by its annotation and by its group,
	// counts once.
	if got := r.cameElsewhere(pr, []schedv1alpha1.Reservation{*res}, 10); got != 1 {
		t.Errorf("came elsewhere: %d, want 1 (both, once)", got)
	}
	if got := watchBookingOnce(t, r, cl, pr); meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionBookingExpired) != nil {
		t.Fatalf("ended with 2 of 4 pods come: %+v", got.Status.Conditions)
	}

	woken := func(p *v1.Pod) []string {
		var out []string
		for _, req := range r.requestsOfBoundPod(ctx, p) {
			out = append(out, req.Namespace+"/"+req.Name)
		}
		return out
	}
	if got := woken(member("m1", "ns", "trainer", "n1", res)); !equalNames(got, "ns/gang", "ns/also") {
		t.Errorf("a bound member wakes %v, want ns/gang and ns/also", got)
	}
	if got := woken(both); !equalNames(got, "ns/gang", "ns/also") {
		t.Errorf("a bound member consuming the request wakes %v, want ns/gang and ns/also, once each", got)
	}
	if got := woken(member("m2", "ns", "trainer", "", nil)); got != nil {
		t.Errorf("an unbound member wakes %v, want none", got)
	}
	if got := woken(member("m3", "elsewhere", "trainer", "n1", nil)); got != nil {
		t.Errorf("a member of another namespace's group wakes %v, want none", got)
	}

	for _, p := range []*v1.Pod{member("m1", "ns", "trainer", "n1", res), member("m4", "ns", "trainer", "n2", nil)} {
		if err := informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	got := watchBookingOnce(t, r, cl, pr)
	cond := meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionBookingExpired)
	want := "all 4 pods of the request came: 2 to their booking, 2 to nodes outside it"
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonCapacityBookingConsumed || cond.Message != want {
		t.Fatalf("BookingExpired %+v, want True, CapacityBookingConsumed, %q", cond, want)
	}
}

// equalNames reports whether got holds want, in any order, once each.
func equalNames(got []string, want ...string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}
