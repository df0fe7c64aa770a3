package reservation

import (
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// forged is p bound to node with an allocation annotation it wrote itself:
// reservation r's UID and the highest priority there is.
func forged(p *v1.Pod, r *schedv1alpha1.Reservation, node string) *v1.Pod {
	p = p.DeepCopy()
	v, _ := json.Marshal(schedv1alpha1.ReservationAllocation{Name: r.Name, UID: r.UID, Priority: 2147483647})
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[schedv1alpha1.AnnotationAllocated] = string(v)
	p.Spec.NodeName = node
	return p
}

// assertUntouched checks that r still holds all of its 4 CPUs on n1 for
// its owners: nothing counted against it, not consumed, no bound owner.
func assertUntouched(t *testing.T, f *fixture, r *schedv1alpha1.Reservation) {
	t.Helper()
	if got := f.requestedCPU("n1"); got != 4000 {
		t.Errorf("reservation holds %dm on n1, want 4000m", got)
	}
	e := f.store.entries[r.UID]
	if f.store.consumed(e) {
		t.Error("reservation consumed by a forged allocation")
	}
	if got := f.store.remaining(e)[v1.ResourceCPU]; got.MilliValue() != 4000 {
		t.Errorf("remaining %s CPU, want 4", got.String())
	}
	if got := f.store.boundOwners(r.UID, "n1"); len(got) != 0 {
		t.Errorf("bound owners %v, want none", got)
	}
	if len(f.store.candidatesFor(ownerPod("other-owner", "1"))) != 1 {
		t.Error("the reservation is no longer offered to its owners")
	}
}

// A bound pod that is none of the reservation's owners, on its node, names
// the reservation's UID in its annotation: the reservation is unchanged.
func TestForgedAllocationByNonOwnerIgnored(t *testing.T) {
	f := newFixture(t, node("n1", "8"))
	r := makeReservation("r1", "4").Available("n1").Obj() // allocate-once
	f.store.upsert(r)

	intruder := wrappers.MakePod("intruder", "ns").UID("pod-intruder").Label("app", "other").Requests("cpu", "1").Obj()
	f.store.observePod(forged(intruder, r, "n1"), false)
	assertUntouched(t, f, r)

	// Nor does a pod in another namespace with the owners' labels.
	elsewhere := wrappers.MakePod("p", "other").UID("pod-elsewhere").Label("app", "owner").Requests("cpu", "1").Obj()
	f.store.observePod(forged(elsewhere, r, "n1"), false)
	assertUntouched(t, f, r)
}

// A pod that looks like an owner but is bound to another node does not
// consume the reservation either.
func TestForgedAllocationOnAnotherNodeIgnored(t *testing.T) {
	f := newFixture(t, node("n1", "8"), node("n2", "8"))
	r := makeReservation("r1", "4").Available("n1").Obj()
	f.store.upsert(r)

	f.store.observePod(forged(ownerPod("p", "1"), r, "n2"), false)
	assertUntouched(t, f, r)
}

// The annotation is only checked against the live reservation: a pod seen
// before its reservation (informer order after a restart) counts once the
// reservation is known, if it is an owner on the reservation's node.
func TestAllocationSeenBeforeReservation(t *testing.T) {
	f := newFixture(t, node("n1", "8"))
	r := makeReservation("r1", "4").Available("n1").AllocateOnce(false).Obj()
	f.store.observePod(allocated(ownerPod("p", "1"), r, "n1"), false)
	f.store.observePod(forged(ownerPod("q", "1"), r, "n2"), false)
	f.store.upsert(r)
	if got := f.requestedCPU("n1"); got != 3000 {
		t.Errorf("reservation holds %dm on n1, want 3000m", got)
	}
	if got := f.store.boundOwners(r.UID, "n1"); len(got) != 1 || got[0].pod.Name != "p" {
		t.Errorf("bound owners %v, want ns/p", got)
	}
}

// Victim priorities: the live reservation's own priority for an owner bound
// in it on its node, nothing for anyone else whatever its annotation says.
func TestAllocatedPriority(t *testing.T) {
	f := newFixture(t, node("n1", "8"), node("n2", "8"))
	r := makeReservation("r1", "4").Priority(50).Available("n1").AllocateOnce(false).Obj()
	f.store.upsert(r)

	honest := allocated(ownerPod("p", "1"), r, "n1")
	f.store.observePod(honest, false)
	if prio, ok := f.store.AllocatedPriority(honest); !ok || prio != 50 {
		t.Errorf("honest owner: priority %d, %v; want 50, true", prio, ok)
	}
	nonOwner := forged(wrappers.MakePod("x", "ns").UID("pod-x").Obj(), r, "n1")
	otherNode := forged(ownerPod("q", "1"), r, "n2")
	unknown := forged(ownerPod("u", "1"), makeReservation("gone", "1").Obj(), "n1")
	for _, p := range []*v1.Pod{nonOwner, otherNode, unknown} {
		if prio, ok := f.store.AllocatedPriority(p); ok {
			t.Errorf("%s: forged allocation gave priority %d", p.Name, prio)
		}
	}
}
