package provisioning

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/provisioning/quota"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestProcessorInstance: as cluster-autoscaler's
// --check-capacity-processor-instance.
func TestProcessorInstance(t *testing.T) {
	check, _ := builtinClass(provv1.ClassCheckCapacity)
	atomic, _ := builtinClass(provv1.ClassBestEffortAtomicScaleUp)
	plain := wrappers.MakeProvisioningRequest("r", "ns", provv1.ClassCheckCapacity).Obj()
	named := wrappers.MakeProvisioningRequest("r", "ns", provv1.ClassCheckCapacity).Parameter(ParameterProcessorInstance, "a").Obj()
	for _, tc := range []struct {
		instance string
		pr       *provv1.ProvisioningRequest
		class    Class
		want     bool
	}{
		{instance: "", pr: plain, class: check, want: true},
		{instance: "", pr: named, class: check, want: false},
		{instance: "a", pr: named, class: check, want: true},
		{instance: "b", pr: named, class: check, want: false},
		{instance: "a", pr: plain, class: check, want: false},
		{instance: "", pr: plain, class: atomic, want: true},
		{instance: "a", pr: plain, class: atomic, want: false},
	} {
		r := &Reconciler{ProcessorInstance: tc.instance}
		if got := r.servesInstance(tc.pr, tc.class); got != tc.want {
			t.Errorf("instance %q, request's %q, handler %s: served %v, want %v", tc.instance,
				tc.pr.Spec.Parameters[ParameterProcessorInstance], tc.class.Handler, got, tc.want)
		}
	}
}

// TestNoUpstreamClasses: the upstream names are left alone, but a
// ProvisioningClass is served.
func TestNoUpstreamClasses(t *testing.T) {
	pc := wrappers.MakeProvisioningClass("ours", autoscalingv1alpha1.HandlerCheckCapacity).Obj()
	r, _ := fakeReconciler(t, time.Now(), pc)
	r.NoUpstreamClasses = true
	ctx := context.Background()
	for _, name := range []string{provv1.ClassCheckCapacity, provv1.ClassBestEffortAtomicScaleUp, provv1.ClassCheckCapacityLegacy} {
		if _, served, err := r.resolveClass(ctx, wrappers.MakeProvisioningRequest("r", "ns", name).Obj()); err != nil || served {
			t.Errorf("%s: served %v, %v", name, served, err)
		}
	}
	c, served, err := r.resolveClass(ctx, wrappers.MakeProvisioningRequest("r", "ns", "ours").Obj())
	if err != nil || !served || c.Handler != autoscalingv1alpha1.HandlerCheckCapacity {
		t.Errorf("ProvisioningClass ours: %+v served %v, %v", c, served, err)
	}
}

// TestDeleteFinished: a request is deleted the TTL after its first
// terminal condition, not before, and never with a TTL of 0.
func TestDeleteFinished(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	pr := wrappers.MakeProvisioningRequest("done", "ns", provv1.ClassCheckCapacity).Obj()
	pr.UID = "u1"
	pr.Status.Conditions = []metav1.Condition{
		{Type: provv1.ConditionProvisioned, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-10 * time.Hour))},
		{Type: provv1.ConditionBookingExpired, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))},
		{Type: provv1.ConditionCapacityRevoked, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
	}
	if got := newRequest(pr).endedAt(); !got.Equal(now.Add(-2 * time.Hour)) {
		t.Fatalf("ended at %v, want 2h ago", got)
	}
	r, c := fakeReconciler(t, now, pr)
	ctx := context.Background()
	for _, tc := range []struct {
		ttl     time.Duration
		requeue time.Duration
		gone    bool
	}{
		{ttl: 0},
		{ttl: 3 * time.Hour, requeue: time.Hour},
		{ttl: 2 * time.Hour, gone: true},
	} {
		r.FinishedRequestTTL = tc.ttl
		res, err := r.deleteFinished(ctx, newRequest(pr))
		if err != nil || res.RequeueAfter != tc.requeue {
			t.Errorf("ttl %s: %+v, %v; want a requeue after %s", tc.ttl, res, err, tc.requeue)
		}
		err = c.Get(ctx, client.ObjectKeyFromObject(pr), &provv1.ProvisioningRequest{})
		if gone := err != nil; gone != tc.gone {
			t.Errorf("ttl %s: deleted %v (%v), want %v", tc.ttl, gone, err, tc.gone)
		}
	}
}

// TestExistingConsumersQuotaCheck: a namespace whose quota the request's
// gated pods fill is not refused for counting them twice.
func TestExistingConsumersQuotaCheck(t *testing.T) {
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	pod := wrappers.MakePod("p", "ns").Requests("cpu", "1").Obj()
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).PodSet("workers", 3).Obj()
	pr.UID = "u"
	q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cpu"},
		Spec:   v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("3")}},
		Status: v1.ResourceQuotaStatus{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("3")}, Used: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("3")}}}
	r, _ := fakeReconciler(t, time.Now(), q)
	var gated []*v1.Pod
	for _, name := range []string{"job-0", "job-1", "job-2"} {
		gated = append(gated, wrappers.MakePod(name, "ns").Requests("cpu", "1").
			Annotation(provv1.AnnotationConsume, "job").Gated("kueue.x-k8s.io/admission").Obj())
	}
	// Pods of another request and finished ones do not count.
	other := wrappers.MakePod("other", "ns").Requests("cpu", "1").Annotation(provv1.AnnotationConsume, "another").Obj()
	done := wrappers.MakePod("done", "ns").Requests("cpu", "1").Annotation(provv1.AnnotationConsume, "job").Phase(v1.PodSucceeded).Obj()
	r.Pods = podLister(t, append(gated, other, done)...)
	rq := &request{pr: pr, class: c, sets: []simulator.PodSet{{Name: "0-workers", Pod: pod, Count: 3}}}
	if err := r.checkNamespaceQuota(context.Background(), rq.pr, rq.sets, rq.pr.UID, booked(t, r)); err != nil {
		t.Errorf("3 gated pods of the request fill the quota: %v", err)
	}
	r.Pods = podLister(t, gated[0], other, done)
	err := r.checkNamespaceQuota(context.Background(), rq.pr, rq.sets, rq.pr.UID, booked(t, r))
	if err == nil || !strings.Contains(err.Error(), "1 of the request's pods exist already") {
		t.Errorf("1 of 3 pods exists, quota full: %v", err)
	}
	// Running pods that name the request (the tenant writes the
	// annotation) and pods being deleted do not stand for its pods: the
	// request would otherwise book on top of a quota they fill already.
	var running []*v1.Pod
	for i, p := range gated {
		p = p.DeepCopy()
		p.Spec.SchedulingGates = nil
		if i < 2 {
			p.Spec.NodeName = "node-a"
		} else {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		running = append(running, p)
	}
	r.Pods = podLister(t, running...)
	err = r.checkNamespaceQuota(context.Background(), rq.pr, rq.sets, rq.pr.UID, booked(t, r))
	if err == nil || !strings.Contains(err.Error(), "exceeded") || strings.Contains(err.Error(), "exist already") {
		t.Errorf("2 bound pods and 1 being deleted name the request, quota full: %v", err)
	}

	// A request naming a PodGroup: its pending members are its pods,
	// annotated or not; another group's are not.
	var members []*v1.Pod
	for _, name := range []string{"gang-0", "gang-1", "gang-2"} {
		members = append(members, wrappers.MakePod(name, "ns").Requests("cpu", "1").PodGroup("trainer").Obj())
	}
	stranger := wrappers.MakePod("stranger", "ns").Requests("cpu", "1").PodGroup("other").Obj()
	gang := rq.pr.DeepCopy()
	gang.Spec.Parameters = map[string]provv1.Parameter{ParameterPodGroup: "trainer"}
	r.Pods = podLister(t, append(members, stranger)...)
	if err := r.checkNamespaceQuota(context.Background(), gang, rq.sets, gang.UID, booked(t, r)); err != nil {
		t.Errorf("3 pending members of the request's PodGroup fill the quota: %v", err)
	}
	r.Pods = podLister(t, members[0], stranger)
	err = r.checkNamespaceQuota(context.Background(), gang, rq.sets, gang.UID, booked(t, r))
	if err == nil || !strings.Contains(err.Error(), "1 of the request's pods exist already") {
		t.Errorf("1 of 3 members exists, quota full: %v", err)
	}
	r.Pods = podLister(t, append(members, stranger)...)
	err = r.checkNamespaceQuota(context.Background(), rq.pr, rq.sets, rq.pr.UID, booked(t, r))
	if err == nil || strings.Contains(err.Error(), "exist already") {
		t.Errorf("a request naming no PodGroup counted a gang's members as its own: %v", err)
	}
}

// TestLostBookings: only Reservations that lost their node or were
// preempted with pods to come count, by pod set, from their names.
func TestLostBookings(t *testing.T) {
	uid := types.UID("u")
	failed := func(name, reason string, pods, came int) schedv1alpha1.Reservation {
		w := wrappers.MakeReservation(name, "cpu", "1").Phase(schedv1alpha1.ReservationFailed).
			Condition(schedv1alpha1.ConditionReady, metav1.ConditionFalse, reason, "").
			Annotation(AnnotationBookedPods, strconv.Itoa(pods))
		for i := range came {
			w = w.CurrentOwner(v1.ObjectReference{Name: "p" + strconv.Itoa(i)})
		}
		return *w.Obj()
	}
	rs := []schedv1alpha1.Reservation{
		failed(bookingName(uid, 0, 0), schedv1alpha1.ReasonNodeDeleted, 4, 1),
		failed(rebookName(uid, 1, 2, 0), schedv1alpha1.ReasonPreempted, 1, 0),
		failed(bookingName(uid, 1, 1), schedv1alpha1.ReasonExpired, 3, 0),
		failed(bookingName(uid, 2, 0), schedv1alpha1.ReasonPreempted, 2, 2),
		failed("someone-elses", schedv1alpha1.ReasonPreempted, 1, 0),
	}
	l := lostBookings(uid, rs, recordedOwners)
	if l.total != 5 || l.pods[0] != 3 || l.pods[1] != 1 || len(l.pods) != 2 || l.unknown != 1 || len(l.reservations) != 3 {
		t.Errorf("lost %+v; want 3 pods of set 0, 1 of set 1, 1 unknown, 3 reservations", l)
	}
	if _, ok := bookingSet(uid, "provreq-u-x-0"); ok {
		t.Errorf("a set index that is no number was read")
	}
	if _, ok := bookingSet(uid, "provreq-u--1-0"); ok {
		t.Errorf("a negative set index was read")
	}
}

// TestBookingEnd: the latest expiry, by Expires, TTL or the class.
func TestBookingEnd(t *testing.T) {
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	t0 := time.Now().Truncate(time.Second)
	at := func(name string, created time.Time) *wrappers.ReservationWrapper {
		w := wrappers.MakeReservation(name, "cpu", "1")
		w.CreationTimestamp = metav1.NewTime(created)
		return w
	}
	withExpires := at("c", t0).Obj()
	withExpires.Spec.Expires = &metav1.Time{Time: t0.Add(30 * time.Minute)}
	rs := []schedv1alpha1.Reservation{*at("a", t0).TTL(time.Minute).Obj(), *at("b", t0).Obj()}
	if got := bookingEnd(rs, c); !got.Equal(t0.Add(c.BookingDuration)) {
		t.Errorf("end %v, want creation + booking duration", got)
	}
	if got := bookingEnd(append(rs, *withExpires), c); !got.Equal(t0.Add(30 * time.Minute)) {
		t.Errorf("end %v, want the Expires of c", got)
	}
}

func podLister(t *testing.T, pods ...*v1.Pod) corelisters.PodLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewPodLister(idx)
}

// TestGrew: a pod set booked again must not ask for more per pod than its
// lost Reservations held.
func TestGrew(t *testing.T) {
	uid := types.UID("u")
	shared := *wrappers.MakeReservation(bookingName(uid, 0, 0), "cpu", "3").Annotation(AnnotationBookedPods, "3").Obj()
	other := *wrappers.MakeReservation(bookingName(uid, 1, 0), "cpu", "100m").Obj()
	for _, tc := range []struct {
		cpu  string
		grew bool
	}{{"1", false}, {"500m", false}, {"1001m", true}} {
		pod := wrappers.MakePod("", "").Requests("cpu", tc.cpu).Obj()
		if name, got := grew(pod, []schedv1alpha1.Reservation{shared, other}, uid, 0); got != tc.grew {
			t.Errorf("a pod of %s CPU against 3 CPUs booked for 3 pods: grew %v (%s), want %v", tc.cpu, got, name, tc.grew)
		}
	}
	mem := wrappers.MakePod("", "").Requests("memory", "1Gi").Obj()
	if name, got := grew(mem, []schedv1alpha1.Reservation{shared}, uid, 0); !got || name != v1.ResourceMemory {
		t.Errorf("a pod asking for memory, which was not booked: grew %v (%s)", got, name)
	}
}

// TestQuotaCountsScaleUpsInFlight: a scale-up in flight holds the namespace's
// quota for the pods it plans, before it has a booking, and counts once when
// it has one; a request's own booking counts when a part of it is booked
// again.
func TestQuotaCountsScaleUpsInFlight(t *testing.T) {
	ctx := context.Background()
	c, _ := builtinClass(provv1.ClassBestEffortAtomicScaleUp)
	tmpl := wrappers.MakePodTemplate("workers", "tenant").Requests("cpu", "1").Obj()
	scaling := scalingUp("a", 6)
	r := quotaReconciler(t, tmpl, scaling)
	pod := &v1.Pod{ObjectMeta: *tmpl.Template.ObjectMeta.DeepCopy(), Spec: *tmpl.Template.Spec.DeepCopy()}
	pod.Namespace = "tenant"
	check := func(count int32, except types.UID) error {
		b := wrappers.MakeProvisioningRequest("b", "tenant", provv1.ClassBestEffortAtomicScaleUp).PodSet("workers", count).Obj()
		b.UID = "b"
		sets, missing, err := r.podSets(ctx, b)
		if err != nil || missing != "" {
			t.Fatalf("pod sets: %v, %q", err, missing)
		}
		return r.checkNamespaceQuota(ctx, b, sets, except, booked(t, r))
	}
	if err := check(4, "b"); err != nil {
		t.Errorf("4 pods beside a scale-up of 6, quota 10: %v", err)
	}
	if err := check(5, "b"); err == nil || !strings.Contains(err.Error(), "exceeded quota") {
		t.Errorf("5 pods beside a scale-up of 6, quota 10: %v, want exceeded", err)
	}
	// The scale-up's nodes are Ready and its booking is made: it counts
	// through its Reservation, once.
	r.assume([]*schedv1alpha1.Reservation{bookingFor(scaling, 0, 0, pod, "n1", 6, c)})
	if err := check(4, "b"); err != nil {
		t.Errorf("4 pods beside a booking of 6, quota 10: %v", err)
	}
	if err := check(5, "b"); err == nil {
		t.Errorf("5 pods beside a booking of 6, quota 10: passed")
	}
	// A rebook of 5 of a's pods counts a's surviving booking of 6.
	if err := r.checkNamespaceQuota(ctx, scaling, []simulator.PodSet{{Name: "0-workers", Pod: pod, Count: 5}}, "", booked(t, r)); err == nil {
		t.Errorf("a rebook of 5 pods beside the request's own booking of 6, quota 10: passed")
	}
}

// TestBookingAfterScaleUpCheckedAgain: the booking made when a scale-up's
// nodes are Ready is checked against the quota with the PodTemplate as it is
// then: a template grown while the nodes came up is not booked.
func TestBookingAfterScaleUpCheckedAgain(t *testing.T) {
	ctx := context.Background()
	c, _ := builtinClass(provv1.ClassBestEffortAtomicScaleUp)
	// Checked at 6 × 1 CPU when the scale-up started; 6 × 2 CPU now.
	grown := wrappers.MakePodTemplate("workers", "tenant").Requests("cpu", "2").Obj()
	scaling := scalingUp("a", 6)
	r := quotaReconciler(t, grown, scaling)
	r.PriorityClasses = schedulinglisters.NewPriorityClassLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	rq := newRequest(scaling)
	rq.class = c
	var missing string
	var err error
	if rq.sets, missing, err = r.podSets(ctx, scaling); err != nil || missing != "" {
		t.Fatalf("pod sets: %v, %q", err, missing)
	}
	if !rq.scaleUpInFlight() {
		t.Fatal("the request's scale-up is not in flight")
	}
	tk, err := r.theTurns().enter(client.ObjectKeyFromObject(rq.pr))
	if err != nil {
		t.Fatal(err)
	}
	defer tk.done()
	_, todo, err := r.placeAndAssume(ctx, rq, tk)
	if qe := (*quota.ExceededError)(nil); !errors.As(err, &qe) || len(todo) != 0 {
		t.Errorf("booking 6 × 2 CPU under a quota of 10 after the scale-up: %d Reservations, %v; want a quota error", len(todo), err)
	}
}

// TestQuotaCountsScaleUpsJustPlanned: a scale-up planned a moment ago, whose
// attempt the cache does not show yet, holds the quota too (two atomic
// requests started together could otherwise both pass), until it is known
// not to have started.
func TestQuotaCountsScaleUpsJustPlanned(t *testing.T) {
	ctx := context.Background()
	r := quotaReconciler(t, wrappers.MakePodTemplate("workers", "tenant").Requests("cpu", "1").Obj())
	request := func(name string, count int32) (*provv1.ProvisioningRequest, []simulator.PodSet) {
		pr := wrappers.MakeProvisioningRequest(name, "tenant", provv1.ClassBestEffortAtomicScaleUp).PodSet("workers", count).Obj()
		pr.UID = types.UID(name)
		sets, missing, err := r.podSets(ctx, pr)
		if err != nil || missing != "" {
			t.Fatalf("pod sets: %v, %q", err, missing)
		}
		return pr, sets
	}
	planned, plannedSets := request("a", 6)
	r.assumeScaleUp(planned, quota.Demands(plannedSets))
	b, bSets := request("b", 5)
	if err := r.checkNamespaceQuota(ctx, b, bSets, b.UID, booked(t, r)); err == nil {
		t.Errorf("5 pods beside a scale-up of 6 just planned, quota 10: passed")
	}
	// The scale-up's own checks do not count it.
	if err := r.checkNamespaceQuota(ctx, planned, plannedSets, planned.UID, booked(t, r)); err != nil {
		t.Errorf("the planned request itself: %v", err)
	}
	r.unassumeScaleUp(planned.UID)
	if err := r.checkNamespaceQuota(ctx, b, bSets, b.UID, booked(t, r)); err != nil {
		t.Errorf("5 pods once the scale-up did not start, quota 10: %v", err)
	}
}

// TestBookingLimit: a namespace's live Reservations (placed, being placed,
// or assumed) count toward --max-bookings-per-namespace; ended ones and
// other namespaces' do not; a booking larger than the limit alone says so.
func TestBookingLimit(t *testing.T) {
	res := func(name, request string, phase schedv1alpha1.ReservationPhase) *schedv1alpha1.Reservation {
		return wrappers.MakeReservation(name, "cpu", "1").Annotation(AnnotationRequest, request).Phase(phase).Obj()
	}
	r, _ := fakeReconciler(t, time.Now(),
		res("a", "tenant/r1", schedv1alpha1.ReservationAvailable),
		res("b", "tenant/r1", schedv1alpha1.ReservationPending),
		res("c", "tenant/r2", schedv1alpha1.ReservationFailed),
		res("d", "neighbour/r3", schedv1alpha1.ReservationAvailable))
	r.MaxBookingsPerNamespace = 4
	r.assume([]*schedv1alpha1.Reservation{res("e", "tenant/r4", "")})
	if err := r.checkBookingLimit(booked(t, r), "tenant", 1); err != nil {
		t.Errorf("3 live and 1 more, limit 4: %v", err)
	}
	le := (*bookingLimitError)(nil)
	if err := r.checkBookingLimit(booked(t, r), "tenant", 2); !errors.As(err, &le) || le.live != 3 ||
		!strings.Contains(err.Error(), "namespace tenant's requests hold 3, of the 4") {
		t.Errorf("3 live and 2 more, limit 4: %v", err)
	}
	if err := r.checkBookingLimit(booked(t, r), "tenant", 5); err == nil || !strings.Contains(err.Error(), "needs 5 Reservations, more than the 4") {
		t.Errorf("a booking of 5, limit 4: %v", err)
	}
	if err := r.checkBookingLimit(booked(t, r), "neighbour", 3); err != nil {
		t.Errorf("another namespace, 1 live and 3 more: %v", err)
	}
}

// quotaReconciler serves namespace tenant, whose quota allows 10 CPUs, with
// objs in its cache and no pod.
func quotaReconciler(t *testing.T, objs ...client.Object) *Reconciler {
	t.Helper()
	q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "cpu"},
		Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("10")}}}
	r, _ := fakeReconciler(t, time.Now(), append(objs, q)...)
	r.Pods = podLister(t)
	return r
}

// scalingUp is an atomic request of namespace tenant, named and of UID
// name, for count pods of PodTemplate workers, with a scale-up in flight.
func scalingUp(name string, count int32) *provv1.ProvisioningRequest {
	pr := withAttempt(name, name+"-1")
	pr.Spec = wrappers.MakeProvisioningRequest(name, "tenant", provv1.ClassBestEffortAtomicScaleUp).PodSet("workers", count).Obj().Spec
	return pr
}

// booked is bookedNow for a test.
func booked(t *testing.T, r *Reconciler) []schedv1alpha1.Reservation {
	t.Helper()
	rs, err := r.bookedNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
