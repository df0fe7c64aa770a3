package asyncpreemption

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// What a pod group's preemption sees of the victims: a pod being preempted
// is gone, a reservation's placeholder is no victim (the highest priority),
// an owner placed in its reservation has the reservation's priority, and a
// gang's member and any other pod keep theirs.
func TestAsVictims(t *testing.T) {
	e := newEnv(t)
	e.exec.deleting[victim("gone", 1).UID] = time.Now()
	ext := frameworkext.New()
	reservepod.Provide(ext, &fakeProvider{fakeAllocations: fakeAllocations{"uid-owner": 50, "uid-member": 50}})
	e.exec.lookupProvider = func() reservepod.Provider { return reservepod.ProviderOf(ext) }
	pl := &Plugin{exec: e.exec}

	placeholder := wrappers.MakePod("r", "").UID("uid-r").Priority(10).NodeName("n1").
		Annotation(reservepod.Annotation, "r").Annotation(reservepod.PriorityAnnotation, "10").Obj()
	member := withAllocation("member", 5, "uid-r", 0)
	member.Spec.SchedulingGroup = wrappers.MakePod("", "").PodGroup("g").Obj().Spec.SchedulingGroup
	snapshot := internalcache.NewSnapshot([]*v1.Pod{
		victim("gone", 1), victim("plain", 3), placeholder, withAllocation("owner", 5, "uid-r", 0), member,
	}, []*v1.Node{wrappers.MakeNode("n1").Obj()})
	if err := snapshot.StartMutations(); err != nil {
		t.Fatal(err)
	}
	if err := pl.asVictims(klog.Background(), snapshot); err != nil {
		t.Fatal(err)
	}
	ni, err := snapshot.NodeInfos().Get("n1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, pi := range ni.GetPods() {
		got[pi.GetPod().Name] = podPriority(pi.GetPod())
	}
	want := map[string]int32{"plain": 3, "r": 2147483647, "owner": 50, "member": 5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("victim priorities (-want +got):\n%s", diff)
	}
	if err := snapshot.EndMutations(); err != nil {
		t.Fatal(err)
	}
	if ni, _ := snapshot.NodeInfos().Get("n1"); len(ni.GetPods()) != 5 {
		t.Errorf("after the preemption the snapshot holds %d pods, want its 5 again", len(ni.GetPods()))
	}
}
