package reservation

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// nodeInfoFromCache is the node as a scheduling cycle's snapshot holds it.
func (f *fixture) nodeInfo(name string) fwk.NodeInfo {
	f.t.Helper()
	ni, err := f.cache.GetNode(name)
	if err != nil {
		f.t.Fatal(err)
	}
	return ni
}

func TestFilterHookGivesOwnersACopyWithTheirReservation(t *testing.T) {
	f := newFixture(t, node("n1", "4"), node("n2", "4"))
	f.store.upsert(makeReservation("big", "3").Available("n1").Obj())
	f.store.upsert(makeReservation("small", "1").Available("n1").Obj())
	pl := &Plugin{store: f.store}
	ctx := context.Background()

	owner := ownerPod("p", "2")
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(ctx, state, owner, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	n1 := f.nodeInfo("n1")
	before := n1.GetRequested().GetMilliCPU()
	_, adjusted, ok, st := pl.BeforeFilter(ctx, state, owner, n1)
	if !ok || !st.IsSuccess() {
		t.Fatalf("BeforeFilter on n1: ok=%v status=%v", ok, st)
	}
	// "small" (1 CPU) cannot hold the 2-CPU pod; "big" can, and is taken off.
	if got := adjusted.GetRequested().GetMilliCPU(); got != before-3000 {
		t.Errorf("adjusted n1 requests %dm, want %dm", got, before-3000)
	}
	if got := n1.GetRequested().GetMilliCPU(); got != before {
		t.Errorf("the hook modified the snapshot's NodeInfo: %dm, want %dm", got, before)
	}
	if _, _, ok, _ := pl.BeforeFilter(ctx, state, owner, f.nodeInfo("n2")); ok {
		t.Error("BeforeFilter changed n2, which holds none of the pod's reservations")
	}
	if got, _ := pl.Score(ctx, state, owner, adjusted); got != fwk.MaxNodeScore {
		t.Errorf("score on n1 = %d, want %d", got, fwk.MaxNodeScore)
	}
	if got, _ := pl.Score(ctx, state, owner, f.nodeInfo("n2")); got != 0 {
		t.Errorf("score on n2 = %d, want 0", got)
	}
	_, nodes, ok, _ := pl.BeforeScore(ctx, state, owner, []fwk.NodeInfo{n1, f.nodeInfo("n2")})
	if !ok || nodes[0] != adjusted {
		t.Error("BeforeScore did not hand scorers the adjusted n1")
	}

	if st := pl.Reserve(ctx, state, owner, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if c := readState(state).claimed; c == nil || c.name != "big" {
		t.Errorf("Reserve claimed %+v, want big", c)
	}
	pl.Unreserve(ctx, state, owner, "n1")
	if got := f.requestedCPU("n1"); got != 4000 {
		t.Errorf("after Unreserve, n1 holds %dm, want both reservations (4000m)", got)
	}
}

// Owners filtered over an unchanged node share one copy of it; any change
// to the node or to what the reservation holds makes a new one.
func TestFilterHookReusesTheAdjustedNodeWhileNothingChanged(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	f.store.upsert(makeReservation("r", "2").Available("n1").Obj())
	pl := &Plugin{store: f.store}
	ctx := context.Background()
	filter := func(owner *v1.Pod, ni fwk.NodeInfo) fwk.NodeInfo {
		t.Helper()
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(ctx, state, owner, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		_, adjusted, ok, st := pl.BeforeFilter(ctx, state, owner, ni)
		if !ok || !st.IsSuccess() {
			t.Fatalf("BeforeFilter: ok=%v status=%v", ok, st)
		}
		return adjusted
	}
	first := filter(ownerPod("a", "1"), f.nodeInfo("n1"))
	if again := filter(ownerPod("b", "1"), f.nodeInfo("n1")); again != first {
		t.Error("a second owner on the unchanged node got a new copy")
	}
	if got := first.GetRequested().GetMilliCPU(); got != 0 {
		t.Errorf("adjusted n1 requests %dm, want 0 (only the reservation was on it)", got)
	}

	// Another pod lands on n1: the scheduler's NodeInfo has a new
	// generation, and the copy must show the pod.
	changed := f.nodeInfo("n1").Snapshot()
	changed.AddPodInfo(mustPodInfo(t, wrappers.MakePod("other", "x").UID("other").NodeName("n1").Requests("cpu", "1").Obj()))
	adjusted := filter(ownerPod("c", "1"), changed)
	if adjusted == first {
		t.Fatal("the copy of an older state of n1 was reused")
	}
	if got := adjusted.GetRequested().GetMilliCPU(); got != 1000 {
		t.Errorf("adjusted n1 requests %dm, want 1000m (the new pod)", got)
	}
}

func mustPodInfo(t *testing.T, p *v1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

func TestNonOwnersAndReservationsSkip(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	r := makeReservation("r1", "3").Available("n1").Obj()
	f.store.upsert(r)
	pl := &Plugin{store: f.store}
	ctx := context.Background()
	for name, p := range map[string]*v1.Pod{
		"non-owner":   ownerPod("x", "1").DeepCopy(),
		"reservation": reservepod.New(makeReservation("r2", "1").Obj()),
	} {
		if name == "non-owner" {
			p.Labels = nil
		}
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(ctx, state, p, nil); st.Code() != fwk.Skip {
			t.Errorf("%s: PreFilter = %v, want Skip", name, st)
		}
		if _, _, ok, _ := pl.BeforeFilter(ctx, state, p, f.nodeInfo("n1")); ok {
			t.Errorf("%s: BeforeFilter changed the node", name)
		}
		if got, want := state.ShouldSkipAllPostFilterPlugins(), name == "reservation"; got != want {
			t.Errorf("%s: PostFilter (preemption) skipped = %v, want %v", name, got, want)
		}
		if st := pl.PreScore(ctx, state, p, nil); st.Code() != fwk.Skip {
			t.Errorf("%s: PreScore = %v, want Skip", name, st)
		}
	}
	if _, st := pl.SignPod(ctx, reservepod.New(makeReservation("r3", "1").Obj())); st.IsSuccess() {
		t.Error("a reservation was signed for batching")
	}
	a, _ := pl.SignPod(ctx, ownerPod("a", "1"))
	b, _ := pl.SignPod(ctx, ownerPod("b", "1"))
	if len(a) != 1 || !reflect.DeepEqual(a, b) {
		t.Errorf("owners of the same reservations signed differently: %v, %v", a, b)
	}
	nonOwner := ownerPod("x", "1")
	nonOwner.Labels = nil
	if frags, st := pl.SignPod(ctx, nonOwner); !st.IsSuccess() || len(frags) != 0 {
		t.Errorf("a non-owner pod: %v, %v; want signed with no fragment", frags, st)
	}
	if st := pl.Bind(ctx, framework.NewCycleState(), nonOwner, "n1"); st.Code() != fwk.Skip {
		t.Errorf("Bind of a real pod = %v, want Skip", st)
	}
}

func TestPreemptingReservationIsNominated(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	big := makeReservation("big", "2").Priority(100).Obj()
	f.store.upsert(big)
	sh := &shared{store: f.store}
	preempting := sets.New(v1.DefaultSchedulerName)
	sh.preempting.Store(&preempting)
	pl := &Plugin{store: f.store, shared: sh}
	ctx := context.Background()

	for name, r := range map[string]*schedv1alpha1.Reservation{"default policy": big, "Never": makeReservation("calm", "1").Priority(100).PreemptionPolicy(v1.PreemptNever).Obj()} {
		state := framework.NewCycleState()
		pl.PreFilter(ctx, state, reservepod.New(r), nil)
		if got, want := state.ShouldSkipAllPostFilterPlugins(), name == "Never"; got != want {
			t.Errorf("%s: PostFilter skipped = %v, want %v", name, got, want)
		}
	}

	f.store.nominate(big.UID, "n1")
	filtered := func(p *v1.Pod) int64 {
		state := framework.NewCycleState()
		pl.PreFilter(ctx, state, p, nil)
		_, ni, ok, _ := pl.BeforeFilter(ctx, state, p, f.nodeInfo("n1"))
		if !ok {
			return f.nodeInfo("n1").GetRequested().GetMilliCPU()
		}
		return ni.GetRequested().GetMilliCPU()
	}
	lower := wrappers.MakePod("lower", "ns").UID("lower").Priority(50).Obj()
	higher := wrappers.MakePod("higher", "ns").UID("higher").Priority(200).Obj()
	if got := filtered(lower); got != 2000 {
		t.Errorf("a lower-priority pod's filters see %dm requested on n1, want the nominated reservation's 2000m", got)
	}
	if got := filtered(higher); got != 0 {
		t.Errorf("a higher-priority pod's filters see %dm requested on n1, want 0", got)
	}
	if got := filtered(reservepod.New(big)); got != 0 {
		t.Errorf("the nominated reservation counts itself: %dm", got)
	}
	// What AsyncPreemption sees through reservepod.Provider.
	if got := f.store.NominatedOn("n1"); len(got) != 1 || got[0].UID != big.UID {
		t.Errorf("NominatedOn(n1) = %v, want the reservation big", got)
	}
	if got := f.store.NominatedOn("n2"); got != nil {
		t.Errorf("NominatedOn(n2) = %v, want none", got)
	}

	// Placed: the nomination ends.
	if st := pl.Reserve(ctx, framework.NewCycleState(), reservepod.New(big), "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if got := filtered(lower); got != 0 {
		t.Errorf("after Reserve, the nomination still holds %dm", got)
	}
	// An Available (or deleted) reservation cannot be nominated.
	f.store.upsert(makeReservation("big", "2").Priority(100).Available("n1").Obj())
	f.store.nominate(big.UID, "n1")
	if n := len(f.store.nominated); n != 0 {
		t.Errorf("%d nominations of non-pending reservations", n)
	}
}
