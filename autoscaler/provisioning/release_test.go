package provisioning

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// laggingCache is the API behind c as a cache that shows no Reservation
// yet.
func laggingCache(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*schedv1alpha1.ReservationList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
}

func booking(name string, pr *provv1.ProvisioningRequest) *schedv1alpha1.Reservation {
	res := wrappers.MakeReservation(name).Obj()
	res.Labels = map[string]string{LabelRequestUID: string(pr.UID)}
	res.Annotations = map[string]string{AnnotationRequest: pr.Namespace + "/" + pr.Name}
	return res
}

// TestReleaseReadsThroughTheAPI: a request deleted right after its booking
// was created, before the cache shows the booking, has the booking
// released before its finalizer goes: nothing is left behind. Before the
// fix release listed the cache only, and both Reservations stayed.
func TestReleaseReadsThroughTheAPI(t *testing.T) {
	ctx := context.Background()
	pr := wrappers.MakeProvisioningRequest("fast", "ns", provv1.ClassCheckCapacity).Obj()
	pr.UID = "uid-1"
	pr.Finalizers = []string{Finalizer}
	now := metav1.Now()
	pr.DeletionTimestamp = &now
	// One booking the API server has, and one this process is still
	// creating (assumed).
	created := booking(bookingName(pr.UID, 0, 0), pr)
	_, c := fakeReconciler(t, time.Now(), pr, created)
	r, _ := fakeReconciler(t, time.Now())
	r.Client, r.APIReader = laggingCache(c.(client.WithWatch)), c
	inFlight := booking(bookingName(pr.UID, 0, 1), pr)
	r.assume([]*schedv1alpha1.Reservation{inFlight})
	if err := c.Create(ctx, inFlight.DeepCopy()); err != nil {
		t.Fatal(err)
	}

	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)}); err != nil {
		t.Fatal(err)
	}
	var left schedv1alpha1.ReservationList
	if err := c.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d Reservations left behind by the deleted request, want 0", len(left.Items))
	}
}

// TestOrphanedBookingsOfAnEarlierRequest: the bookings of a request that
// is gone (its finalizer removed by hand) are deleted when a request of the
// same name is reconciled, or when its name is, so the new request's pods
// (which name the request, not its UID) do not consume them; the new
// request's own bookings stay, and so does a booking the cache shows of a
// request the API server still has.
func TestOrphanedBookingsOfAnEarlierRequest(t *testing.T) {
	ctx := context.Background()
	old := wrappers.MakeProvisioningRequest("reused", "ns", provv1.ClassCheckCapacity).Obj()
	old.UID = "uid-old"
	cur := old.DeepCopy()
	cur.UID = "uid-new"
	orphan, own := booking("orphan", old), booking("own", cur)
	gone := wrappers.MakeProvisioningRequest("gone", "ns", provv1.ClassCheckCapacity).Obj()
	gone.UID = "uid-gone"
	goneBooking := booking("gone-booking", gone)
	r, c := fakeReconciler(t, time.Now(), cur, orphan, own, goneBooking)

	for _, name := range []string{"reused", "gone"} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	var left schedv1alpha1.ReservationList
	if err := c.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, res := range left.Items {
		names = append(names, res.Name)
	}
	if len(names) != 1 || names[0] != "own" {
		t.Errorf("Reservations left: %v, want only the current request's (own)", names)
	}
}

// TestRefusedBookingIsNotAssumed: a booking is assumed before it is created
// (outside bookMu); a Reservation the API server refuses is forgotten, so
// that no later simulation counts room nobody holds, while the others stay
// assumed until the cache shows them.
func TestRefusedBookingIsNotAssumed(t *testing.T) {
	ctx := context.Background()
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").Obj()
	r, c := fakeReconciler(t, time.Now())
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetName() == "refused" {
				return apierrors.NewInvalid(schedv1alpha1.SchemeGroupVersion.WithKind("Reservation").GroupKind(), obj.GetName(), nil)
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	todo := []*schedv1alpha1.Reservation{booking("accepted", pr), booking("refused", pr)}
	r.assume(todo)
	if err := r.createAssumed(ctx, todo); err == nil || !apierrors.IsInvalid(errors.Unwrap(err)) {
		t.Fatalf("createAssumed: %v, want the refusal", err)
	}
	var assumed []string
	for _, res := range r.withAssumed(nil) {
		assumed = append(assumed, res.Name)
	}
	if len(assumed) != 1 || assumed[0] != "accepted" {
		t.Errorf("assumed after the refusal: %v, want [accepted]", assumed)
	}
}

// TestBookingNotMadeTwiceBeforeTheCacheShowsIt: a request reconciled again
// right after its booking was created, before the cache shows the booking
// (its own status write can come back first), waits for the cache; it is
// not simulated and booked again. Each node holds the request's pods
// once, so a second simulation would book the other node under the same
// Reservation name: the create finds the name taken, and the booking
// assumed for later simulations would name a node the API server's
// Reservation is not on (in the throughput benchmark, the room of the
// first was booked again and the scheduler refused it). Before the fix
// the second reconcile booked it twice.
func TestBookingNotMadeTwiceBeforeTheCacheShowsIt(t *testing.T) {
	ctx := context.Background()
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").PodSet("tmpl", 3).Obj()
	pr.Finalizers = []string{Finalizer}
	tmpl := wrappers.MakePodTemplate("tmpl", "ns").Requests("cpu", "1").Obj()
	r, c := fakeReconciler(t, time.Now(), pr, tmpl)
	r.Client = laggingCache(c.(client.WithWatch))
	r.Simulator = planner(t).Simulator
	r.Clock = clock.RealClock{}
	r.PlacementTimeout = time.Minute
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, name := range []string{"a", "b"} {
		if err := nodes.Add(st.MakeNode().Name(name).Capacity(map[v1.ResourceName]string{v1.ResourceCPU: "3", v1.ResourcePods: "110"}).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	r.Nodes = corelisters.NewNodeLister(nodes)
	r.Pods = corelisters.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))

	created := func() map[string]string {
		var list schedv1alpha1.ReservationList
		if err := c.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, res := range list.Items {
			out[res.Name] = res.Spec.Template.NodeName
		}
		return out
	}
	key := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)}
	if _, err := r.Reconcile(ctx, key); err != nil {
		t.Fatal(err)
	}
	first := created()
	if len(first) != 1 {
		t.Fatalf("after the first reconcile: Reservations %v, want one", first)
	}
	res, err := r.Reconcile(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Errorf("second reconcile: requeue after %v, want a wait of at most a second for the cache", res.RequeueAfter)
	}
	if got := created(); !maps.Equal(got, first) {
		t.Errorf("after the second reconcile: Reservations %v, want %v", got, first)
	}
	for _, a := range r.withAssumed(nil) {
		if want := first[a.Name]; a.Spec.Template.NodeName != want {
			t.Errorf("assumed %s on node %q; the API server has it on %q", a.Name, a.Spec.Template.NodeName, want)
		}
	}
}

// TestAssumedBookingIsACopy: the create of a booking writes the API
// server's answer into the object it sends while other workers' simulations
// read what was assumed; the assumed booking is a copy, so they never read
// it half-written. Before the fix they shared the object, and in the
// throughput benchmark a simulation read a 4-CPU booking as holding
// nothing and booked its room again.
func TestAssumedBookingIsACopy(t *testing.T) {
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").Obj()
	r, _ := fakeReconciler(t, time.Now())
	sent := booking("b", pr)
	sent.Spec.Template.NodeName = "n1"
	sent.Spec.Template.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	r.assume([]*schedv1alpha1.Reservation{sent})
	// What a create does to the object it sends.
	sent.Spec.Template.NodeName = ""
	sent.Spec.Template.Requests = nil
	got := r.withAssumed(nil)
	if len(got) != 1 || got[0].Spec.Template.NodeName != "n1" || got[0].Spec.Template.Requests.Cpu().IsZero() {
		t.Errorf("assumed %d bookings, the first on node %q with requests %v; want the booking as it was assumed (node n1, 1 CPU)",
			len(got), got[0].Spec.Template.NodeName, got[0].Spec.Template.Requests)
	}
}

// TestBookingStatusWrites: a booking the scheduler places
// at once costs the request one status write, Provisioned with Accepted,
// and one event; one still not placed after bookingReportAfter is reported
// as being booked, condition and event, once.
func TestBookingStatusWrites(t *testing.T) {
	ctx := context.Background()
	start := time.Now().Truncate(time.Second) // what a creation timestamp keeps
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").PodSet("tmpl", 2).Obj()
	pr.Finalizers = []string{Finalizer}
	tmpl := wrappers.MakePodTemplate("tmpl", "ns").Requests("cpu", "1").Obj()
	res := booking(bookingName(pr.UID, 0, 0), pr)
	res.Annotations[AnnotationBookedPods] = "2"
	res.Spec.Template.NodeName = "n1"
	res.CreationTimestamp = metav1.NewTime(start)
	r, c := fakeReconciler(t, start, pr, tmpl, res)
	clk := r.Clock.(*testingclock.FakeClock)
	r.PlacementTimeout = time.Minute
	key := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)}
	reconcileAt := func(at time.Duration) (reconcile.Result, *provv1.ProvisioningRequest, []string) {
		t.Helper()
		clk.SetTime(start.Add(at))
		result, err := r.Reconcile(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var got provv1.ProvisioningRequest
		if err := c.Get(ctx, key.NamespacedName, &got); err != nil {
			t.Fatal(err)
		}
		var events []string
		for rec := r.Recorder.(*record.FakeRecorder); len(rec.Events) > 0; {
			events = append(events, <-rec.Events)
		}
		return result, &got, events
	}

	// Not placed yet, 1 s after the booking: nothing written.
	result, got, events := reconcileAt(time.Second)
	if len(got.Status.Conditions) != 0 || len(events) != 0 {
		t.Errorf("1 s after booking: conditions %v, events %v; want none yet", got.Status.Conditions, events)
	}
	if want := bookingReportAfter - time.Second; result.RequeueAfter != want {
		t.Errorf("1 s after booking: requeue after %v, want %v", result.RequeueAfter, want)
	}
	// Still not placed at bookingReportAfter: reported, Accepted with it.
	_, got, events = reconcileAt(bookingReportAfter)
	if c := meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionProvisioned); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonBooking {
		t.Errorf("at %v: Provisioned %+v, want False/%s", bookingReportAfter, c, ReasonBooking)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, provv1.ConditionAccepted) {
		t.Errorf("at %v: not Accepted: %v", bookingReportAfter, got.Status.Conditions)
	}
	if len(events) != 1 || !strings.Contains(events[0], ReasonBooking) {
		t.Errorf("at %v: events %v, want the %s event once", bookingReportAfter, events, ReasonBooking)
	}
	// Placed: Provisioned, no second Accepted event.
	placed := &schedv1alpha1.Reservation{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(res), placed); err != nil {
		t.Fatal(err)
	}
	placed.Status.Phase, placed.Status.NodeName = schedv1alpha1.ReservationAvailable, "n1"
	if err := c.Update(ctx, placed); err != nil {
		t.Fatal(err)
	}
	_, got, events = reconcileAt(bookingReportAfter + time.Second)
	if !meta.IsStatusConditionTrue(got.Status.Conditions, provv1.ConditionProvisioned) {
		t.Errorf("placed: not Provisioned: %v", got.Status.Conditions)
	}
	if len(events) != 1 || !strings.Contains(events[0], provv1.ReasonCapacityIsFound) {
		t.Errorf("placed: events %v, want %s once", events, provv1.ReasonCapacityIsFound)
	}
}

// TestTemplateWakesOnlyItsRequests: a PodTemplate's event wakes the
// requests of its namespace that name it and have not ended, not every
// request of the namespace (Kueue makes a template for every request).
func TestTemplateWakesOnlyItsRequests(t *testing.T) {
	ctx := context.Background()
	waiting := wrappers.MakeProvisioningRequest("waiting", "ns", provv1.ClassCheckCapacity).PodSet("tmpl", 1).Obj()
	other := wrappers.MakeProvisioningRequest("other", "ns", provv1.ClassCheckCapacity).PodSet("another", 1).Obj()
	ended := wrappers.MakeProvisioningRequest("ended", "ns", provv1.ClassCheckCapacity).PodSet("tmpl", 1).Obj()
	meta.SetStatusCondition(&ended.Status.Conditions, metav1.Condition{Type: provv1.ConditionFailed, Status: metav1.ConditionTrue, Reason: "Test"})
	elsewhere := wrappers.MakeProvisioningRequest("elsewhere", "other-ns", provv1.ClassCheckCapacity).PodSet("tmpl", 1).Obj()
	r, _ := fakeReconciler(t, time.Now(), waiting, other, ended, elsewhere)
	got := r.requestsOfTemplate(ctx, wrappers.MakePodTemplate("tmpl", "ns").Obj())
	if len(got) != 1 || got[0].Name != "waiting" || got[0].Namespace != "ns" {
		t.Errorf("woken %v, want only ns/waiting", got)
	}
}
