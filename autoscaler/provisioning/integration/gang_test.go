//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/gangs"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestPodGroupBooking: a check-capacity request naming a PodGroup
// (parameter podGroup) books room its members use without a consume
// annotation. With the booking and outsiders filling both nodes, a gang
// of one member more than the booking holds is placed not at all (gang
// scheduling, upstream's plugins in Gantry's profile), and the booking
// keeps its room; a gang of another PodGroup cannot use it either. Once
// the outsiders go, the whole gang is placed, its members in the booking
// as far as it goes, and the request ends with its booking consumed. A
// podGroup that cannot be a PodGroup's name fails the request.
func TestPodGroupBooking(t *testing.T) {
	e := &env{Env: schedtest.SetupWithArgs(t, schedtest.EnableGangs(t)...), t: t}
	e.CreateNodes(2, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner()
	ctx := context.Background()
	pods := e.Client.CoreV1().Pods("default")
	e.template("default", "member", "1")

	e.request("default", "bad-group", provv1.ClassCheckCapacity, "member", 1, map[string]provv1.Parameter{provisioning.ParameterPodGroup: "Trainer_1"})
	e.expectFailed("default", "bad-group", provisioning.ReasonInvalidParameter, "parameter podGroup must name a PodGroup", "which parameter is wrong")

	e.request("default", "trainer", provv1.ClassCheckCapacity, "member", 6, map[string]provv1.Parameter{provisioning.ParameterPodGroup: "trainer"})
	e.waitCondition("default", "trainer", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
	uid := e.uid("default", "trainer")
	for _, res := range e.bookings(uid) {
		if !ownedByGroup(&res, "trainer") {
			t.Errorf("booking %s has owners %+v, none of them PodGroup default/trainer", res.Name, res.Spec.Owners)
		}
	}
	util.Must(t).Until(ctx, util.Timeout, "booking placed", func(context.Context) bool { return placedPods(e.bookings(uid)) == 6 })
	// The 2 CPU left, however the booking is spread over the nodes.
	for _, name := range []string{"outsider-0", "outsider-1"} {
		e.pod(name, "1", "")
		util.Must(t).Until(ctx, util.Timeout, name+" scheduled beside the booking", func(context.Context) bool { return e.nodeOf(name) != "" })
	}

	createGang := func(group string, members int) {
		t.Helper()
		if _, err := e.Client.SchedulingV1beta1().PodGroups("default").Create(ctx, wrappers.MakePodGroup(group, "default", int32(members)).Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range members {
			p := wrappers.MakePod(fmt.Sprintf("%s-%d", group, i), "default").Label("gang", group).Requests("cpu", "1").PodGroup(group).NoGrace().Obj()
			if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	bound := func(group string) []v1.Pod {
		t.Helper()
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "gang=" + group})
		if err != nil {
			t.Fatal(err)
		}
		var out []v1.Pod
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				out = append(out, p)
			}
		}
		return out
	}

	// Seven members of 1 CPU, six booked and 2 CPU held by the outsiders:
	// the gang does not fit whole. Two members of another group do not fit
	// outside the booking and may not use it.
	createGang("trainer", 7)
	createGang("intruder", 2)
	deadline := time.Now().Add(util.ConsistentDuration + 5*time.Second)
	for time.Now().Before(deadline) {
		for _, group := range []string{"trainer", "intruder"} {
			if b := bound(group); len(b) > 0 {
				t.Fatalf("%s of gang %s was bound to %s: the gang does not fit whole outside what it may use", b[0].Name, group, b[0].Spec.NodeName)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if booked, came := e.bookedPods(uid); booked != 6 || came != 0 {
		t.Errorf("booking of %d pods with %d come while the gang waits, want 6 and 0", booked, came)
	}

	// The intruders go (they would race the gang for the room freed next),
	// then the outsiders: the whole gang is placed.
	e.deletePods("intruder-0", "intruder-1", "outsider-0", "outsider-1")
	util.Must(t).Until(ctx, util.Timeout, "the whole gang bound", func(context.Context) bool { return len(bound("trainer")) == 7 })
	inBooking := 0
	for _, p := range bound("trainer") {
		var alloc schedv1alpha1.ReservationAllocation
		if v := p.Annotations[schedv1alpha1.AnnotationAllocated]; v != "" && json.Unmarshal([]byte(v), &alloc) == nil &&
			strings.HasPrefix(alloc.Name, "provreq-"+uid+"-") {
			inBooking++
		}
	}
	// A member bound beside a Reservation of its own that is full names
	// it too (the Reservation plugin allocates an owner to the first one on
	// its node): at least the six booked name it.
	if inBooking < 6 {
		t.Errorf("%d of 7 members were bound into the booking, want at least 6", inBooking)
	}
	c := e.waitCondition("default", "trainer", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonCapacityBookingConsumed, util.Timeout)
	t.Logf("BookingExpired: %s", c.Message)
	util.Must(t).Until(ctx, util.Timeout, "booking released", func(context.Context) bool { return len(e.bookings(uid)) == 0 })
}

// ownedByGroup reports whether a PodGroup owner of res names group of
// namespace default.
func ownedByGroup(res *schedv1alpha1.Reservation, group string) bool {
	for _, o := range res.Spec.Owners {
		if o.PodGroup == group && o.Namespace == "default" {
			return true
		}
	}
	return false
}

// TestPodGroupRequests: with --pod-group-requests-class, a gang too large
// for the cluster gets an atomic scale-up request of its own: the
// provisioner adds a node, books the gang's room, the scheduler places the
// whole gang in it, and the request and its PodTemplate go once the group
// is placed.
func TestPodGroupRequests(t *testing.T) {
	e := &env{Env: schedtest.SetupWithArgs(t, schedtest.EnableGangs(t)...), t: t}
	ctx := context.Background()
	e.CreateNodes(1, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startKubelet()
	e.startProvisioner(e.withNodeGroups, func(o *app.Options) { o.PodGroupRequestsClass = "atomic-pool" })
	e.class("atomic-pool", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}})
	pods := e.Client.CoreV1().Pods("default")

	// Four members of 2 CPU: node-0 holds two.
	if _, err := e.Client.SchedulingV1beta1().PodGroups("default").Create(ctx, wrappers.MakePodGroup("trainer", "default", 4).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		p := wrappers.MakePod(fmt.Sprintf("trainer-%d", i), "default").Label("gang", "trainer").Requests("cpu", "2").PodGroup("trainer").NoGrace().Obj()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	name := gangs.RequestName("trainer")
	var pr *provv1.ProvisioningRequest
	util.Must(t).Until(ctx, util.LongTimeout, "a request for the unschedulable gang", func(ctx context.Context) bool {
		got, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, name, metav1.GetOptions{})
		pr = got
		return err == nil
	})
	if pr.Spec.ProvisioningClassName != "atomic-pool" || len(pr.Spec.PodSets) != 1 || pr.Spec.PodSets[0].Count != 4 ||
		pr.Spec.Parameters[provisioning.ParameterPodGroup] != "trainer" {
		t.Fatalf("request %+v", pr.Spec)
	}
	util.Must(t).Until(ctx, util.LongTimeout, "the whole gang bound", func(ctx context.Context) bool {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "gang=trainer"})
		if err != nil {
			return false
		}
		for _, p := range list.Items {
			if p.Spec.NodeName == "" {
				return false
			}
		}
		return len(list.Items) == 4
	})
	if got := e.groupNodes("pool"); len(got) != 1 {
		t.Errorf("%d pool nodes, want 1", len(got))
	}
	util.Must(t).Until(ctx, util.Timeout, "the request and its template deleted once the gang is placed", func(ctx context.Context) bool {
		_, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, name, metav1.GetOptions{})
		templates, lerr := e.Client.CoreV1().PodTemplates("default").List(ctx, metav1.ListOptions{LabelSelector: gangs.LabelPodGroupUID})
		return apierrors.IsNotFound(err) && lerr == nil && len(templates.Items) == 0
	})
}
