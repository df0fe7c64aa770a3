package provisioning

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gantry-dev/gantry/autoscaler/provisioning/quota"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestMaxPodsPerRequest: a request asking for more pods than the limit, over
// all its pod sets, Fails with TooManyPods before anything is read or
// allocated for its pods; one at the limit or under goes on (here it waits
// for its PodTemplate, which does not exist).
func TestMaxPodsPerRequest(t *testing.T) {
	const limit = 5000
	now := time.Now()
	for _, tc := range []struct {
		name   string
		counts []int32
		want   int64 // the count the message names; 0: under the limit
	}{
		{name: "just under", counts: []int32{limit - 1}},
		{name: "at the limit", counts: []int32{limit}},
		{name: "just over", counts: []int32{limit + 1}, want: limit + 1},
		{name: "several sets at the limit", counts: []int32{2000, 2000, 1000}},
		{name: "several sets over the limit", counts: []int32{2000, 2000, 1001}, want: limit + 1},
		{name: "2^31-1", counts: []int32{math.MaxInt32}, want: math.MaxInt32},
		// The sum of three counts near 2^31 overflows an int32, and would
		// wrap to under the limit if summed in one.
		{name: "sum past 2^32", counts: []int32{math.MaxInt32, math.MaxInt32, 2}, want: 2*math.MaxInt32 + 2},
		{name: "sum wrapping to small in int32", counts: []int32{math.MaxInt32, math.MaxInt32, 3}, want: 2*math.MaxInt32 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := wrappers.MakeProvisioningRequest("big", "ns", provv1.ClassCheckCapacity).UID("u1")
			w.CreationTimestamp = metav1.NewTime(now)
			for i, c := range tc.counts {
				w.PodSet(fmt.Sprintf("t%d", i), c)
			}
			r, c := fakeReconciler(t, now, w.Obj())
			r.MaxPodsPerRequest = limit
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w.Obj())}); err != nil {
				t.Fatal(err)
			}
			var pr provv1.ProvisioningRequest
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(w.Obj()), &pr); err != nil {
				t.Fatal(err)
			}
			failed := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionFailed)
			if tc.want == 0 {
				if failed != nil {
					t.Fatalf("a request of %v pods under the limit of %d failed: %+v", tc.counts, limit, failed)
				}
				if a := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionAccepted); a == nil || a.Reason != ReasonPodTemplateNotFound {
					t.Fatalf("a request under the limit did not go on to read its templates: %+v", pr.Status.Conditions)
				}
				return
			}
			if failed == nil || failed.Status != metav1.ConditionTrue || failed.Reason != ReasonTooManyPods {
				t.Fatalf("Failed condition %+v, want True with reason %s", failed, ReasonTooManyPods)
			}
			for _, want := range []string{fmt.Sprintf("asks for %d pods", tc.want), fmt.Sprintf("the %d pods per request", limit), "--max-pods-per-request"} {
				if !strings.Contains(failed.Message, want) {
					t.Errorf("message %q does not say %q", failed.Message, want)
				}
			}
			if p := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionProvisioned); p == nil || p.Status != metav1.ConditionFalse || p.Reason != ReasonTooManyPods {
				t.Errorf("Provisioned condition %+v, want False with reason %s", p, ReasonTooManyPods)
			}
		})
	}
}

// TestMaxPodsPerRequestDefault: an unset limit is the default.
func TestMaxPodsPerRequestDefault(t *testing.T) {
	if got := (&Reconciler{}).maxPodsPerRequest(); got != DefaultMaxPodsPerRequest {
		t.Errorf("unset limit is %d, want %d", got, DefaultMaxPodsPerRequest)
	}
	if got := (&Reconciler{MaxPodsPerRequest: 7}).maxPodsPerRequest(); got != 7 {
		t.Errorf("limit 7 is %d", got)
	}
}

func fakeReconciler(t *testing.T, now time.Time, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	scheme := testScheme(t)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&provv1.ProvisioningRequest{}).
		WithIndex(&schedv1alpha1.Reservation{}, IndexRequest, IndexReservationRequest).
		WithIndex(&provv1.ProvisioningRequest{}, IndexRequestPodGroup, indexRequestPodGroup).Build()
	return &Reconciler{Client: c, APIReader: c, Recorder: record.NewFakeRecorder(100),
		Clock: testingclock.NewFakeClock(now)}, c
}

// TestValidUntilLimit: ValidUntilSeconds is bounded by MaxValidUntil, or by
// the class's own validity when that is longer.
func TestValidUntilLimit(t *testing.T) {
	builtin, _ := builtinClass(provv1.ClassCheckCapacity)
	long := builtin
	long.ValidUntil = 14 * 24 * time.Hour
	max := fmt.Sprint(int64(MaxValidUntil / time.Second))
	over := fmt.Sprint(int64(MaxValidUntil/time.Second) + 1)
	for _, tc := range []struct {
		class   Class
		value   string
		want    time.Duration
		wantErr string
	}{
		{class: builtin, value: max, want: MaxValidUntil},
		{class: builtin, value: over, wantErr: "ValidUntilSeconds must be at most " + max + " seconds (168h0m0s), got \"" + over + "\""},
		{class: builtin, value: "2147483647", wantErr: "must be at most " + max},
		{class: builtin, value: "2147483648", wantErr: "must be a positive number of seconds"},
		{class: long, value: "1209600", want: 14 * 24 * time.Hour},
		{class: long, value: "1209601", wantErr: "must be at most 1209600 seconds"},
	} {
		pr := wrappers.MakeProvisioningRequest("r", "ns", provv1.ClassCheckCapacity).Parameter(provv1.ParameterValidUntilSeconds, provv1.Parameter(tc.value)).Obj()
		p, err := parameters(pr, tc.class)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s with class validity %s: error %v, want %q", tc.value, tc.class.ValidUntil, err, tc.wantErr)
			}
			continue
		}
		if err != nil || p.ValidUntil != tc.want {
			t.Errorf("%s with class validity %s: %v, %v; want %v", tc.value, tc.class.ValidUntil, p.ValidUntil, err, tc.want)
		}
	}
}

// TestBackoffAttemptsUnbounded: the attempt count comes from the request
// and can be anything; with no initial backoff the delay is computed at
// once, not by a loop as long as the count.
func TestBackoffAttemptsUnbounded(t *testing.T) {
	c := Class{BackoffInitial: 0, BackoffMax: time.Minute}
	if got := c.backoff(math.MaxInt); got != 0 {
		t.Errorf("backoff %v, want 0", got)
	}
	c = Class{BackoffInitial: time.Second, BackoffMax: time.Minute}
	if got := c.backoff(math.MaxInt); got != time.Minute {
		t.Errorf("backoff %v, want the maximum", got)
	}
}

// TestCheckQuotaCountsBookings: the namespace's other bookings count as
// the pods that have not come to them yet; the request's own, other
// namespaces', and ended ones do not.
func TestCheckQuotaCountsBookings(t *testing.T) {
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	pod := wrappers.MakePod("p", "ns").Requests("cpu", "1").Obj()
	req := func(ns, name, uid string) *provv1.ProvisioningRequest {
		return wrappers.MakeProvisioningRequest(name, ns, provv1.ClassCheckCapacity).UID(uid).Obj()
	}
	first, self, elsewhere := req("ns", "first", "u1"), req("ns", "self", "u2"), req("other", "first", "u3")
	pending := bookingFor(first, 0, 0, pod, "n1", 4, c) // 4 pods, none come
	available := bookingFor(first, 0, 1, pod, "n2", 3, c)
	available.Status.Phase = schedv1alpha1.ReservationAvailable
	available.Status.NodeName = "n2"
	available.Status.CurrentOwners = []v1.ObjectReference{{Namespace: "ns", Name: "came"}}
	available.Status.Allocated = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")} // 1 of 3 came: 2 held
	ended := bookingFor(first, 0, 2, pod, "n3", 5, c)
	ended.Status.Phase = schedv1alpha1.ReservationFailed
	own := bookingFor(self, 0, 0, pod, "n1", 6, c)
	theirs := bookingFor(elsewhere, 0, 0, pod, "n1", 7, c)
	held := (&Reconciler{}).heldBookings([]schedv1alpha1.Reservation{*pending, *available, *ended, *own, *theirs}, "ns", self.UID)

	hard := v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("10"), v1.ResourcePods: resource.MustParse("10")}
	q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q"},
		Status: v1.ResourceQuotaStatus{Hard: hard, Used: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("1"), v1.ResourcePods: resource.MustParse("1")}}}
	want := func(n int) []quota.Demand {
		return quota.Demands([]simulator.PodSet{{Name: "0-p", Pod: pod, Count: n}})
	}
	// 1 used + 6 booked (4 + 2) + 3 wanted = 10: fits.
	if err := quota.Check([]*v1.ResourceQuota{q}, want(3), held); err != nil {
		t.Errorf("3 pods on top of 1 used and 6 booked, limit 10: %v", err)
	}
	err := quota.Check([]*v1.ResourceQuota{q}, want(4), held)
	for _, s := range []string{"q: pods requested 4, used 1, held by the namespace's other requests 6, limited 10",
		"q: requests.cpu requested 4, used 1, held by the namespace's other requests 6, limited 10"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("4 pods on top of 1 used and 6 booked, limit 10: %v, want %q", err, s)
		}
	}
	// Without the bookings the same request fits (the check before this fix).
	if err := quota.Check([]*v1.ResourceQuota{q}, want(4), nil); err != nil {
		t.Errorf("4 pods on top of 1 used, no bookings, limit 10: %v", err)
	}
}

// TestCheckQuotaForgetsPodsThatCameUnrecorded: the pods bound into a
// booking that its status does not record (they finished before the
// scheduler's status controller saw them) count as come: the booking holds
// room for the others only. Before the fix it held room for every pod but
// the recorded owner, so a namespace of short batch Jobs was refused quota
// that nothing used.
func TestCheckQuotaForgetsPodsThatCameUnrecorded(t *testing.T) {
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	pod := wrappers.MakePod("p", "ns").Requests("cpu", "1").Obj()
	first := wrappers.MakeProvisioningRequest("first", "ns", provv1.ClassCheckCapacity).UID("u1").Obj()
	self := wrappers.MakeProvisioningRequest("self", "ns", provv1.ClassCheckCapacity).UID("u2").Obj()
	res := bookingFor(first, 0, 0, pod, "n1", 4, c)
	res.UID = "res-1"
	res.Status.Phase, res.Status.NodeName = schedv1alpha1.ReservationAvailable, "n1"
	recorded := boundInto(t, "p0", "ns", "n1", first.Name, res)
	res.Status.CurrentOwners = []v1.ObjectReference{{Kind: "Pod", Namespace: "ns", Name: recorded.Name, UID: recorded.UID}}
	res.Status.Allocated = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}

	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Pod{}, 0, PodIndexers())
	r := &Reconciler{PodInformer: informer}
	for _, p := range []*v1.Pod{recorded, boundInto(t, "p1", "ns", "n1", first.Name, res), boundInto(t, "p2", "ns", "n1", first.Name, res)} {
		if err := informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	held := r.heldBookings([]schedv1alpha1.Reservation{*res}, "ns", self.UID)
	if len(held) != 1 || held[0].Pods != 1 {
		t.Fatalf("held %s, want 1 demand of 1 pod (4 booked, 3 came)", describeHeld(held))
	}
	if got := held[0].Pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("held cpu %s, want 1 (one pod's)", got.String())
	}

	if err := informer.GetIndexer().Add(boundInto(t, "p3", "ns", "n1", first.Name, res)); err != nil {
		t.Fatal(err)
	}
	if held := r.heldBookings([]schedv1alpha1.Reservation{*res}, "ns", self.UID); len(held) != 0 {
		t.Errorf("held %s once every booked pod came, want nothing", describeHeld(held))
	}
}

func describeHeld(held []quota.Demand) string {
	var b strings.Builder
	for _, d := range held {
		fmt.Fprintf(&b, "[%s: %d pods, %v] ", d.Pod.Name, d.Pods, d.Pod.Spec.Containers[0].Resources.Requests)
	}
	return b.String()
}
