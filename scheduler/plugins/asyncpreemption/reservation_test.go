package asyncpreemption

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	gantryfake "github.com/gantry-dev/gantry/crds/client/clientset/versioned/fake"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// reservePodInCache is a reservation's pod as the Reservation plugin puts it
// in the scheduler's cache: highest priority, its own in an annotation.
func reservePodInCache(name string) *v1.Pod {
	return wrappers.MakePod(name, "").UID("uid-"+name).Priority(2147483647).NodeName("n1").Requests("cpu", "2").
		Annotation("scheduling.gantry.dev/reserve-pod", name).
		Annotation("scheduling.gantry.dev/reservation-priority", "5").Obj()
}

func TestVictimPrioritiesInNodeCopy(t *testing.T) {
	rsv := reservePodInCache("r1")
	alloc, _ := json.Marshal(schedv1alpha1.ReservationAllocation{Name: "r2", UID: "u2", Priority: 50})
	owner := wrappers.MakePod("owner", "ns").UID("uid-owner").Priority(1).NodeName("n1").
		Annotation(schedv1alpha1.AnnotationAllocated, string(alloc)).Obj()
	plain := victim("plain", 3)
	ni := framework.NewNodeInfo(rsv, owner, plain)
	ni.SetNode(wrappers.MakeNode("n1").Obj())

	if err := withVictimPriorities(klog.Background(), ni, fakeAllocations{"uid-owner": 50}); err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, pi := range ni.GetPods() {
		got[pi.GetPod().Name] = *pi.GetPod().Spec.Priority
	}
	want := map[string]int32{"r1": 5, "owner": 50, "plain": 3}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: victim priority %d, want %d", k, got[k], v)
		}
	}
	if *rsv.Spec.Priority != 2147483647 {
		t.Error("the cached pod itself was modified")
	}
}

func TestPreemptingAReservationFailsIt(t *testing.T) {
	gc := gantryfake.NewSimpleClientset(wrappers.MakeReservation("r1").UID("uid-r1").Available("n1").Obj())
	e := newEnv(t, preemptor())
	e.exec.reservations = gc.SchedulingV1alpha1().Reservations()
	e.exec.start(preemptor(), "n1", []*v1.Pod{reservePodInCache("r1")})
	e.exec.wait()
	got, err := gc.SchedulingV1alpha1().Reservations().Get(t.Context(), "r1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != schedv1alpha1.ReservationFailed || len(got.Status.Conditions) != 1 ||
		got.Status.Conditions[0].Reason != schedv1alpha1.ReasonPreempted {
		t.Errorf("reservation after preemption: %+v", got.Status)
	}
	if n := e.deletes.Load(); n != 0 {
		t.Errorf("%d pod deletes for a reservation victim", n)
	}
	if activated, _ := e.h.snapshot(); len(activated) != 1 {
		t.Errorf("preemptor not re-activated: %v", activated)
	}
}

// fakeNominator stands for the Reservation plugin's nominations.
type fakeNominator struct {
	mu      sync.Mutex
	pods    []*v1.Pod
	cleared []types.UID
}

func (n *fakeNominator) NominatedOn(node string) []*v1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*v1.Pod
	for _, p := range n.pods {
		if p.Status.NominatedNodeName == node {
			out = append(out, p)
		}
	}
	return out
}

func (n *fakeNominator) ClearNomination(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cleared = append(n.cleared, uid)
}

// fakeProvider stands for what the Reservation plugin provides: its
// nominations and its allocation checks.
type fakeProvider struct {
	fakeNominator
	fakeAllocations
}

// Pending reservations of lower priority nominated to the target node lose
// their nomination, through the Reservation plugin's nominator (they have
// no status to patch), and look for another place at once; higher ones
// keep it.
func TestLowerReservationNominationsCleared(t *testing.T) {
	pending := func(name string, prio int32) *v1.Pod {
		return wrappers.MakePod(name, "").UID("uid-"+name).Priority(prio).NominatedNodeName("n1").
			Annotation("scheduling.gantry.dev/reserve-pod", name).Obj()
	}
	v := victim("v", 1)
	e := newEnv(t, v, preemptor())
	n := &fakeProvider{fakeNominator: fakeNominator{pods: []*v1.Pod{pending("r-lower", 5), pending("r-higher", 500)}}}
	e.exec.lookupProvider = func() reservepod.Provider { return n }
	e.exec.start(preemptor(), "n1", []*v1.Pod{v})
	e.exec.wait()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.cleared) != 1 || n.cleared[0] != "uid-r-lower" {
		t.Errorf("reservation nominations cleared: %v, want uid-r-lower", n.cleared)
	}
	activated, _ := e.h.snapshot()
	if !slices.Contains(activated, "r-lower") {
		t.Errorf("activated %v: the lower reservation was not sent to look for another place", activated)
	}
	if slices.Contains(activated, "r-higher") {
		t.Errorf("activated %v: the higher reservation lost its place", activated)
	}
}

// Without Gantry's extended handle there is no Reservation plugin to ask:
// a reservation preemptor's failed preemption clears nothing and does not fail.
func TestReservationNominationWithoutNominator(t *testing.T) {
	e := newEnv(t)
	r := reservePodInCache("r1")
	if err := e.exec.clearNomination(t.Context(), r); err != nil {
		t.Errorf("clearing a reservation's nomination without the plugin: %v", err)
	}
	if e.exec.provider() != nil {
		t.Error("a Reservation plugin's provider without Gantry's extended handle")
	}
}

// The Reservation plugin lets pending reservations preempt only in
// profiles whose PostFilter runs reservepod.Preemptor: that is this plugin.
func TestNameIsTheReservePodPreemptor(t *testing.T) {
	if Name != reservepod.Preemptor {
		t.Errorf("plugin name %q, but the Reservation plugin lets reservations preempt through %q", Name, reservepod.Preemptor)
	}
}
