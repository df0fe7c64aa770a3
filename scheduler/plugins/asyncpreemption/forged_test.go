package asyncpreemption

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// fakeAllocations stands for the Reservation plugin's store: the own
// priority of the reservation each pod (by UID) is placed in.
type fakeAllocations map[types.UID]int32

func (f fakeAllocations) AllocatedPriority(p *v1.Pod) (int32, bool) {
	prio, ok := f[p.UID]
	return prio, ok
}

// withAllocation is p bound to n1 with an allocation annotation naming
// reservation uid and the given priority.
func withAllocation(name string, own int32, uid types.UID, prio int32) *v1.Pod {
	v, _ := json.Marshal(schedv1alpha1.ReservationAllocation{Name: "r", UID: uid, Priority: prio})
	return wrappers.MakePod(name, "ns").UID("uid-"+name).Priority(own).NodeName("n1").
		Annotation(schedv1alpha1.AnnotationAllocated, string(v)).Obj()
}

func victimPriorities(t *testing.T, allocs reservepod.Allocations, pods ...*v1.Pod) map[string]int32 {
	t.Helper()
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(wrappers.MakeNode("n1").Obj())
	if err := withVictimPriorities(klog.Background(), ni, allocs); err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, pi := range ni.GetPods() {
		got[pi.GetPod().Name] = *pi.GetPod().Spec.Priority
	}
	return got
}

// A tenant's pod that writes itself an allocation with the highest
// priority there is, naming no reservation it is placed in, stays a victim
// at its own priority: with the Reservation plugin's store, and without it.
func TestForgedAllocationKeepsOwnPriority(t *testing.T) {
	forged := withAllocation("forged", 3, "uid-unknown", math.MaxInt32)
	for name, allocs := range map[string]reservepod.Allocations{
		"store knows no such allocation": fakeAllocations{},
		"no Reservation plugin":          nil,
	} {
		if got := victimPriorities(t, allocs, forged)["forged"]; got != 3 {
			t.Errorf("%s: forged pod has victim priority %d, want its own 3", name, got)
		}
	}
}

// An owner placed in a reservation gets the live reservation's priority,
// whatever priority its annotation carries.
func TestOwnerGetsReservationPriority(t *testing.T) {
	owner := withAllocation("owner", 1, "uid-r", math.MaxInt32)
	stale := withAllocation("stale", 1, "uid-r", 7)
	got := victimPriorities(t, fakeAllocations{"uid-owner": 50, "uid-stale": 50}, owner, stale)
	if got["owner"] != 50 || got["stale"] != 50 {
		t.Errorf("victim priorities %v, want the reservation's 50 for both", got)
	}
	// Never lower than the pod's own.
	high := withAllocation("high", 80, "uid-r", 50)
	if got := victimPriorities(t, fakeAllocations{"uid-high": 50}, high)["high"]; got != 80 {
		t.Errorf("victim priority %d, want the pod's own 80", got)
	}
}

// The executor finds the allocation checks on what the Reservation plugin
// provides to its scheduler, when it needs them (plugins are built in any
// order), and has none without the plugin.
func TestAllocationsFromProvider(t *testing.T) {
	e := newEnv(t)
	if e.exec.allocations() != nil {
		t.Error("allocation checks without a Reservation plugin")
	}
	ext := frameworkext.New()
	e.exec.lookupProvider = func() reservepod.Provider { return reservepod.ProviderOf(ext) }
	if e.exec.allocations() != nil {
		t.Error("allocation checks before the Reservation plugin provided them")
	}
	reservepod.Provide(ext, &fakeProvider{fakeAllocations: fakeAllocations{"uid-owner": 50}})
	a := e.exec.allocations()
	if a == nil {
		t.Fatal("no allocation checks from what the Reservation plugin provided")
	}
	if prio, ok := a.AllocatedPriority(withAllocation("owner", 1, "uid-r", 0)); !ok || prio != 50 {
		t.Errorf("allocated priority %d, %v; want 50, true", prio, ok)
	}
}

func domainVictim(t *testing.T, keyType fwk.EntityKeyType, prio int32, pods ...*v1.Pod) *preemption.DomainVictim {
	t.Helper()
	var infos []fwk.PodInfo
	for _, p := range pods {
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, pi)
	}
	v, err := preemption.NewVictim(infos, prio, keyType)
	if err != nil {
		t.Fatal(err)
	}
	return &preemption.DomainVictim{Victim: v}
}

func victimNames(v *preemption.DomainVictim) []string {
	var names []string
	for _, pi := range v.Pods() {
		names = append(names, pi.GetPod().Name)
	}
	return names
}

// A gang victim (a PodGroup evicted whole) loses the members another
// preemption already takes, is dropped when none is left, and is protected
// as its most protected member: an owner placed in a reservation of higher
// priority than the gang's. Single pods are left as they are.
func TestGroupVictims(t *testing.T) {
	member := func(name string, prio int32) *v1.Pod {
		return wrappers.MakePod(name, "ns").UID("uid-" + name).Priority(prio).NodeName("n1").Obj()
	}
	owner := withAllocation("owner", 5, "uid-r", 0)
	// A member as the node copy lists it: its priority rewritten to its
	// reservation's already (withVictimPriorities).
	rewritten := withAllocation("rewritten", 50, "uid-r", 0)
	preempted := sets.New[types.UID]("uid-gone", "uid-gone2")
	victims := []*preemption.DomainVictim{
		domainVictim(t, fwk.PodKeyType, 5, member("single", 5)),
		domainVictim(t, fwk.PodGroupKeyType, 5, member("a", 5), member("gone", 5)),
		domainVictim(t, fwk.PodGroupKeyType, 5, member("gone2", 5)),
		domainVictim(t, fwk.PodGroupKeyType, 5, member("b", 5), owner),
		domainVictim(t, fwk.PodGroupKeyType, 90, member("c", 90), withAllocation("low-owner", 90, "uid-r", 0)),
		domainVictim(t, fwk.PodGroupKeyType, 5, rewritten),
	}
	got, err := groupVictims(victims, preempted.Has, fakeAllocations{"uid-owner": 50, "uid-low-owner": 50, "uid-rewritten": 50})
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Pods  []string
		Prio  int32
		Group bool
	}
	var views []view
	for _, v := range got {
		views = append(views, view{victimNames(v), v.Priority(), v.IsGroup()})
	}
	want := []view{
		{[]string{"single"}, 5, false},
		{[]string{"a"}, 5, true},
		{[]string{"b", "owner"}, 50, true},
		{[]string{"c", "low-owner"}, 90, true},
		{[]string{"rewritten"}, 50, true},
	}
	if diff := cmp.Diff(want, views); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}
