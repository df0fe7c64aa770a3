package provisioning

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	if err := r.checkNamespaceQuota(context.Background(), rq); err != nil {
		t.Errorf("3 gated pods of the request fill the quota: %v", err)
	}
	r.Pods = podLister(t, gated[0], other, done)
	err := r.checkNamespaceQuota(context.Background(), rq)
	if err == nil || !strings.Contains(err.Error(), "1 of the request's pods exist already") {
		t.Errorf("1 of 3 pods exists, quota full: %v", err)
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
