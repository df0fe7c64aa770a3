package provisioning

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestClasses(t *testing.T) {
	for name, want := range map[string]autoscalingv1alpha1.Handler{
		provv1.ClassCheckCapacity:           autoscalingv1alpha1.HandlerCheckCapacity,
		provv1.ClassCheckCapacityLegacy:     autoscalingv1alpha1.HandlerCheckCapacity,
		provv1.ClassBestEffortAtomicScaleUp: autoscalingv1alpha1.HandlerAtomicScaleUp,
		provv1.ClassAtomicScaleUpLegacy:     autoscalingv1alpha1.HandlerAtomicScaleUp,
	} {
		c, ok := builtinClass(name)
		if !ok || c.Handler != want || c.ValidUntil != DefaultValidUntil || c.BookingDuration != DefaultBookingDuration {
			t.Errorf("%s: %+v, %v", name, c, ok)
		}
	}
	if _, ok := builtinClass("queued-provisioning.gke.io"); ok {
		t.Error("a foreign class was taken as built-in")
	}
	c := classOf(&autoscalingv1alpha1.ProvisioningClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Spec: autoscalingv1alpha1.ProvisioningClassSpec{Handler: autoscalingv1alpha1.HandlerAtomicScaleUp,
			ValidUntilSeconds: ptr.To[int32](60), BookingDuration: &metav1.Duration{Duration: time.Minute},
			Backoff: &autoscalingv1alpha1.Backoff{Initial: &metav1.Duration{Duration: time.Second}}}})
	if c.ValidUntil != time.Minute || c.BookingDuration != time.Minute || c.BackoffInitial != time.Second ||
		c.BackoffMax != DefaultBackoffMax || c.ProvisioningTimeout != DefaultProvisioningTimeout {
		t.Errorf("class from a ProvisioningClass: %+v", c)
	}
	var got []time.Duration
	for n := 1; n <= 11; n++ {
		got = append(got, c.backoff(n))
	}
	if got[0] != time.Second || got[1] != 2*time.Second || got[8] != 256*time.Second || got[10] != DefaultBackoffMax {
		t.Errorf("backoff sequence %v", got)
	}
}

func TestParameters(t *testing.T) {
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	for _, tc := range []struct {
		params  map[string]provv1.Parameter
		want    Parameters
		wantErr string
	}{
		{want: Parameters{ValidUntil: DefaultValidUntil}},
		{params: map[string]provv1.Parameter{"ValidUntilSeconds": "30", "noRetry": "true"}, want: Parameters{ValidUntil: 30 * time.Second, NoRetry: true}},
		{params: map[string]provv1.Parameter{"ValidUntilSeconds": "0"}, wantErr: "ValidUntilSeconds must be a positive number of seconds"},
		{params: map[string]provv1.Parameter{"ValidUntilSeconds": "1h"}, wantErr: `got "1h"`},
		// As cluster-autoscaler: exactly "true" or "false"; anything else
		// is ignored (and said so), never a failure.
		{params: map[string]provv1.Parameter{"noRetry": "false"}, want: Parameters{ValidUntil: DefaultValidUntil}},
		{params: map[string]provv1.Parameter{"noRetry": "True"}, want: Parameters{ValidUntil: DefaultValidUntil,
			Ignored: []string{`parameter noRetry ignored: want "true" or "false", got "True"`}}},
		{params: map[string]provv1.Parameter{"noRetry": "1"}, want: Parameters{ValidUntil: DefaultValidUntil,
			Ignored: []string{`parameter noRetry ignored: want "true" or "false", got "1"`}}},
		{params: map[string]provv1.Parameter{"noRetry": provv1.Parameter(strings.Repeat("x", 10000))}, want: Parameters{ValidUntil: DefaultValidUntil,
			Ignored: []string{`parameter noRetry ignored: want "true" or "false", got "` + strings.Repeat("x", 64) + `..."`}}},
		{params: map[string]provv1.Parameter{"ValidUntilSeconds": "604800"}, want: Parameters{ValidUntil: 7 * 24 * time.Hour}},
		{params: map[string]provv1.Parameter{"ValidUntilSeconds": "604801"}, wantErr: "must be at most 604800 seconds"},
		{params: map[string]provv1.Parameter{"podGroup": "trainer.v2"}, want: Parameters{ValidUntil: DefaultValidUntil, PodGroup: "trainer.v2"}},
		{params: map[string]provv1.Parameter{"podGroup": "Trainer"}, wantErr: `parameter podGroup must name a PodGroup of the request's namespace (a DNS subdomain: at most 253 lowercase letters, digits, '-' and '.'), got "Trainer"`},
		{params: map[string]provv1.Parameter{"podGroup": ""}, wantErr: `parameter podGroup must name a PodGroup`},
		{params: map[string]provv1.Parameter{"podGroup": provv1.Parameter(strings.Repeat("a", 254))}, wantErr: `got "` + strings.Repeat("a", 64) + `..."`},
	} {
		pr := &provv1.ProvisioningRequest{Spec: provv1.ProvisioningRequestSpec{Parameters: tc.params}}
		got, err := parameters(pr, c)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.params, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: %+v, %v", tc.params, got, err)
		}
	}
}

func FuzzParameters(f *testing.F) {
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	f.Add("600", "false", "trainer")
	f.Add("-1", "1", "Trainer_1")
	f.Fuzz(func(t *testing.T, valid, noRetry, group string) {
		pr := &provv1.ProvisioningRequest{Spec: provv1.ProvisioningRequestSpec{Parameters: map[string]provv1.Parameter{
			provv1.ParameterValidUntilSeconds: provv1.Parameter(valid), provv1.ParameterNoRetry: provv1.Parameter(noRetry),
			ParameterPodGroup: provv1.Parameter(group)}}}
		p, err := parameters(pr, c)
		if err == nil && p.ValidUntil <= 0 {
			t.Fatalf("accepted a validity of %v", p.ValidUntil)
		}
		// The group a booking is given to is the one parameters accepted,
		// and a name the API server would take for a PodGroup's.
		if err == nil && (p.PodGroup != group || RequestPodGroup(pr) != group || len(validation.IsDNS1123Subdomain(group)) > 0) {
			t.Fatalf("podGroup %q read as %q, booked for %q", group, p.PodGroup, RequestPodGroup(pr))
		}
		// A message repeats at most maxShownParameter bytes of a value,
		// quoted: up to 4 bytes each (\xNN) and the message's own words.
		limit := 4*maxShownParameter + 160
		if err != nil && len(err.Error()) > limit {
			t.Fatalf("an error of %d bytes", len(err.Error()))
		}
		if p.NoRetry != (noRetry == "true") {
			t.Fatalf("noRetry %q read as %v", noRetry, p.NoRetry)
		}
		for _, why := range p.Ignored {
			if len(why) > limit {
				t.Fatalf("an ignored parameter's message of %d bytes", len(why))
			}
		}
	})
}

func TestBookingFor(t *testing.T) {
	pr := &provv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", UID: "u1"}}
	pod := wrappers.MakePod("", "ml").Requests("cpu", "2").Toleration("gpu").Priority(7).
		Ports(v1.ContainerPort{ContainerPort: 80}, v1.ContainerPort{HostPort: 8080, ContainerPort: 8080}).Obj()
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	b := bookingFor(pr, 1, 3, pod, "n1", 1, c)
	if b.Name != "provreq-u1-1-3" || b.Labels[LabelRequestUID] != "u1" || b.Annotations[AnnotationRequest] != "ml/train" {
		t.Errorf("identity: %s %v %v", b.Name, b.Labels, b.Annotations)
	}
	tmpl := b.Spec.Template
	if tmpl.NodeName != "n1" || tmpl.Requests.Cpu().String() != "2" || len(tmpl.HostPorts) != 1 || len(tmpl.Tolerations) != 1 ||
		*tmpl.Priority != 7 || *tmpl.PreemptionPolicy != v1.PreemptNever || tmpl.SchedulerName != v1.DefaultSchedulerName {
		t.Errorf("template %+v", tmpl)
	}
	if len(b.Spec.Owners) != 2 || b.Spec.Owners[0].Annotation.Key != provv1.AnnotationConsume ||
		b.Spec.Owners[1].Annotation.Key != provv1.AnnotationConsumeLegacy || b.Spec.Owners[0].Namespace != "ml" ||
		b.Spec.Owners[0].Annotation.Value != "train" || b.Spec.TTL.Duration != DefaultBookingDuration || !*b.Spec.AllocateOnce {
		t.Errorf("owners and lifetime %+v", b.Spec)
	}
	// The members of the PodGroup the request names own it too; a name
	// parameters refuses adds no owner.
	gang := pr.DeepCopy()
	gang.Spec.Parameters = map[string]provv1.Parameter{ParameterPodGroup: "trainer"}
	if o := bookingFor(gang, 0, 0, pod, "n1", 1, c).Spec.Owners; len(o) != 3 || o[2].PodGroup != "trainer" || o[2].Namespace != "ml" || o[2].Annotation != nil {
		t.Errorf("owners of a PodGroup's booking %+v", o)
	}
	gang.Spec.Parameters[ParameterPodGroup] = "Trainer"
	if o := bookingFor(gang, 0, 0, pod, "n1", 1, c).Spec.Owners; len(o) != 2 {
		t.Errorf("owners with an invalid PodGroup %+v", o)
	}
	// Three pods share one Reservation of three times the requests.
	shared := bookingFor(pr, 0, 0, cpuPod("2"), "n1", 3, c)
	if shared.Spec.Template.Requests.Cpu().String() != "6" || *shared.Spec.AllocateOnce || BookedPods(shared) != 3 {
		t.Errorf("shared booking: requests %v, allocateOnce %v, pods %d", shared.Spec.Template.Requests, *shared.Spec.AllocateOnce, BookedPods(shared))
	}
}

func TestSummarizeBookings(t *testing.T) {
	r := func(phase schedv1alpha1.ReservationPhase, cond, reason string) *wrappers.ReservationWrapper {
		res := wrappers.MakeReservation("").Phase(phase).StatusNodeName("n1")
		if cond != "" {
			res.Condition(cond, metav1.ConditionFalse, reason, "0/2 nodes are available")
		}
		return res
	}
	s := summarizeBookings([]schedv1alpha1.Reservation{
		*r(schedv1alpha1.ReservationAvailable, "", "").Obj(),
		*r(schedv1alpha1.ReservationSucceeded, "", "").Obj(),
		*r(schedv1alpha1.ReservationFailed, schedv1alpha1.ConditionReady, schedv1alpha1.ReasonExpired).Obj(),
		*r(schedv1alpha1.ReservationPending, schedv1alpha1.ConditionScheduled, schedv1alpha1.ReasonUnschedulable).Obj(),
		*r("", "", "").Obj(),
	}, recordedOwners)
	if s.total != 5 || s.available != 1 || s.consumed != 1 || s.failed[schedv1alpha1.ReasonExpired] != 1 ||
		s.pending != 2 || s.unschedulable != "0/2 nodes are available" || len(s.nodes) != 1 {
		t.Errorf("%+v", s)
	}
	// Shared bookings count in pods: 4 booked with 1 come, 3 all come and
	// then expired (not a failure), 2 expired with 1 come.
	shared := func(phase schedv1alpha1.ReservationPhase, pods, came int, reason string) schedv1alpha1.Reservation {
		res := r(phase, "", "")
		if reason != "" {
			res = r(phase, schedv1alpha1.ConditionReady, reason)
		}
		res.Annotation(AnnotationBookedPods, strconv.Itoa(pods))
		for range came {
			res.CurrentOwner(v1.ObjectReference{Name: "p"})
		}
		return *res.Obj()
	}
	s = summarizeBookings([]schedv1alpha1.Reservation{
		shared(schedv1alpha1.ReservationAvailable, 4, 1, ""),
		shared(schedv1alpha1.ReservationFailed, 3, 3, schedv1alpha1.ReasonExpired),
		shared(schedv1alpha1.ReservationFailed, 2, 1, schedv1alpha1.ReasonExpired),
	}, recordedOwners)
	if s.total != 9 || s.available != 3 || s.consumed != 5 || s.failed[schedv1alpha1.ReasonExpired] != 1 || s.reservations != 3 {
		t.Errorf("shared: %+v", s)
	}
	// A Reservation stands in the simulation for what it still holds.
	avail := wrappers.MakeReservation("a", "cpu", "4").Available("n2").Allocated("cpu", "1").Obj()
	if p := reservationPod(avail); p == nil || p.Spec.NodeName != "n2" || p.Spec.Containers[0].Resources.Requests.Cpu().String() != "3" {
		t.Errorf("available reservation as a pod: %+v", p)
	}
	avail.Status.Phase = schedv1alpha1.ReservationSucceeded
	if p := reservationPod(avail); p != nil {
		t.Error("a consumed reservation still holds capacity in the simulation")
	}
}

// A booking just made counts in the next simulation before the cache shows
// it, and only once when it does.
func TestAssumedBookings(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	r := &Reconciler{Clock: clk}
	mk := func(name string) *schedv1alpha1.Reservation {
		return wrappers.MakeReservation(name).Obj()
	}
	r.assume([]*schedv1alpha1.Reservation{mk("a"), mk("b"), mk("c")})
	got := r.withAssumed([]schedv1alpha1.Reservation{*mk("a")})
	if len(got) != 3 {
		t.Fatalf("cache {a} + assumed {a,b,c} gave %d, want 3", len(got))
	}
	r.unassume("b")
	if got := r.withAssumed(nil); len(got) != 1 || got[0].Name != "c" {
		t.Fatalf("after a shown by the cache and b released: %v, want c", got)
	}
	clk.Step(assumeFor + time.Second)
	if got := r.withAssumed(nil); len(got) != 0 {
		t.Errorf("an assumption outlived %s: %v", assumeFor, got)
	}
}

// Reservations of a booking just created that the cache does not show yet
// are counted for their request only, and only while fresh.
func TestAssumedNotCached(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	r := &Reconciler{Clock: clk}
	mk := func(name, uid string) *schedv1alpha1.Reservation {
		return wrappers.MakeReservation(name).Label(LabelRequestUID, uid).Obj()
	}
	r.assume([]*schedv1alpha1.Reservation{mk("a", "u1"), mk("b", "u1"), mk("c", "u2")})
	if n := r.assumedNotCached("u1", []schedv1alpha1.Reservation{*mk("a", "u1")}); n != 1 {
		t.Errorf("u1 with a cached: %d not cached, want 1 (b)", n)
	}
	clk.Step(assumeFor + time.Second)
	if n := r.assumedNotCached("u1", nil); n != 0 {
		t.Errorf("after %s: %d, want 0", assumeFor, n)
	}
}

// testScheme knows the kinds the provisioner's fake clients hold: core,
// ProvisioningRequests and Reservations.
func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, provv1.AddToScheme, schedv1alpha1.AddToScheme, autoscalingv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}
