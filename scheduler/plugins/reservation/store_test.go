package reservation

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// recordingQueue is the part of the scheduling queue the store drives,
// recording what it was asked to do.
type recordingQueue struct {
	added, deleted, done []string
	unschedulable        []string
	moves                int
}

func (q *recordingQueue) Add(_ context.Context, p *v1.Pod) { q.added = append(q.added, p.Name) }
func (q *recordingQueue) Delete(_ klog.Logger, p *v1.Pod)  { q.deleted = append(q.deleted, p.Name) }
func (q *recordingQueue) AddUnschedulablePodIfNotPresent(_ klog.Logger, pi *framework.QueuedPodInfo, _ int64) error {
	q.unschedulable = append(q.unschedulable, pi.Pod.Name)
	return nil
}
func (q *recordingQueue) SchedulingCycle() int64 { return 1 }
func (q *recordingQueue) Done(uid types.UID)     { q.done = append(q.done, string(uid)) }
func (q *recordingQueue) MoveAllToActiveOrBackoffQueue(klog.Logger, fwk.ClusterEvent, any, any, queue.PreEnqueueCheck) {
	q.moves++
}

type fixture struct {
	t     *testing.T
	store *store
	cache internalcache.Cache
	queue *recordingQueue
}

func newFixture(t *testing.T, nodes ...*v1.Node) *fixture {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	c := internalcache.New(ctx, nil, false, false)
	for _, n := range nodes {
		c.AddNode(logger, n)
	}
	q := &recordingQueue{}
	s := newStore(logger)
	s.attach(c, q, sets.New(v1.DefaultSchedulerName))
	return &fixture{t: t, store: s, cache: c, queue: q}
}

func node(name, cpu string) *v1.Node {
	return st.MakeNode().Name(name).Capacity(map[v1.ResourceName]string{v1.ResourceCPU: cpu, v1.ResourceMemory: "16Gi", v1.ResourcePods: "110"}).Obj()
}

// makeReservation is a pending reservation of cpu for the pods app=owner of
// namespace ns, scheduled by the default profile.
func makeReservation(name, cpu string) *wrappers.ReservationWrapper {
	return wrappers.MakeReservation(name, string(v1.ResourceCPU), cpu).UID("uid-"+name).Generation(1).
		SchedulerName(v1.DefaultSchedulerName).OwnerLabels("ns", map[string]string{"app": "owner"})
}

// requestedCPU is the node's requested milli-CPU in the scheduler cache.
func (f *fixture) requestedCPU(node string) int64 {
	f.t.Helper()
	ni, err := f.cache.GetNode(node)
	if err != nil {
		f.t.Fatal(err)
	}
	return ni.GetRequested().GetMilliCPU()
}

func ownerPod(name, cpu string) *v1.Pod {
	return wrappers.MakePod(name, "ns").UID("pod-"+name).Label("app", "owner").Requests("cpu", cpu).Obj()
}

func allocated(p *v1.Pod, r *schedv1alpha1.Reservation, node string) *v1.Pod {
	p = p.DeepCopy()
	v, _ := json.Marshal(schedv1alpha1.ReservationAllocation{Name: r.Name, UID: r.UID})
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[schedv1alpha1.AnnotationAllocated] = string(v)
	p.Spec.NodeName = node
	return p
}

func TestAvailableReservationHoldsCapacityInCache(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	r := makeReservation("r1", "3").Available("n1").Obj()
	f.store.upsert(r)
	if got := f.requestedCPU("n1"); got != 3000 {
		t.Fatalf("requested CPU on n1 = %dm, want 3000m", got)
	}
	cached, err := f.cache.GetPod(reservepod.New(r))
	if err != nil {
		t.Fatalf("reservation not in cache: %v", err)
	}
	if got := *cached.Spec.Priority; got != math.MaxInt32 {
		t.Errorf("cached reservation priority = %d, want MaxInt32 (never a preemption victim)", got)
	}
	if len(f.queue.added) != 0 {
		t.Errorf("an Available reservation was queued: %v", f.queue.added)
	}

	f.store.remove(r)
	if got := f.requestedCPU("n1"); got != 0 {
		t.Fatalf("after delete, requested CPU on n1 = %dm, want 0", got)
	}
	if f.queue.moves == 0 {
		t.Error("releasing capacity did not move waiting pods")
	}
}

func TestPendingReservationIsQueuedOnceAndDequeued(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	r := makeReservation("r1", "1").Obj()
	f.store.upsert(r)
	f.store.upsert(r.DeepCopy()) // a status-only update
	if diff := cmp.Diff([]string{"r1"}, f.queue.added); diff != "" {
		t.Fatalf("queued (-want +got):\n%s", diff)
	}
	other := makeReservation("other", "1").Obj()
	other.Spec.Template.SchedulerName = "no-such-profile"
	f.store.upsert(other)
	if len(f.queue.added) != 1 {
		t.Errorf("a reservation of a profile without the plugin was queued: %v", f.queue.added)
	}
	f.store.upsert(makeReservation("r1", "1").Available("n1").Obj())
	if diff := cmp.Diff([]string{"r1"}, f.queue.deleted); diff != "" {
		t.Errorf("dequeued once Available (-want +got):\n%s", diff)
	}
}

// candidatesFor returns, by node, what the filter hook would offer pod.
func (s *store) candidatesFor(pod *v1.Pod) map[string][]candidate {
	s.mu.RLock()
	nodes := make([]string, 0, len(s.byNode))
	for n := range s.byNode {
		nodes = append(nodes, n)
	}
	s.mu.RUnlock()
	out := map[string][]candidate{}
	for _, n := range nodes {
		if c := s.candidatesOn(n, pod); len(c) > 0 {
			out[n] = c
		}
	}
	if owns, _, _ := s.ownedHint(pod); len(out) > 0 != owns {
		panic(fmt.Sprintf("ownedHint(%s) says it owns %v, but candidates on nodes are %v", pod.Name, owns, out))
	}
	return out
}

func TestClaimAndReleaseAllocateOnce(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	r := makeReservation("r1", "3").Available("n1").Obj()
	f.store.upsert(r)
	p := ownerPod("p", "2")
	cands := f.store.candidatesFor(p)
	if len(cands["n1"]) != 1 {
		t.Fatalf("candidates = %v, want r1 on n1", cands)
	}
	if !f.store.claim(r.UID, p, "n1") {
		t.Fatal("claim failed")
	}
	// allocateOnce: the claim consumes the reservation; what the pod does
	// not use (1 CPU) is released. The pod itself is the scheduler's to
	// count (it assumes it).
	if got := f.requestedCPU("n1"); got != 0 {
		t.Errorf("after claim, reservation still holds %dm on n1", got)
	}
	if c := f.store.candidatesFor(ownerPod("q", "1")); len(c) != 0 {
		t.Errorf("a consumed reservation is still offered: %v", c)
	}
	f.store.release(r.UID, p)
	if got := f.requestedCPU("n1"); got != 3000 {
		t.Errorf("after release, requested = %dm, want 3000m", got)
	}
}

func TestSharedReservationShrinksByBoundOwners(t *testing.T) {
	f := newFixture(t, node("n1", "8"))
	r := makeReservation("r1", "4").Available("n1").AllocateOnce(false).Obj()
	f.store.upsert(r)

	p := ownerPod("p", "1")
	if !f.store.claim(r.UID, p, "n1") {
		t.Fatal("claim failed")
	}
	if got := f.requestedCPU("n1"); got != 3000 {
		t.Fatalf("after claim, reservation holds %dm, want 3000m", got)
	}
	// The pod binds: the informer sees it with the annotation. The claim
	// becomes an allocation; nothing changes in the cache.
	f.store.observePod(allocated(p, r, "n1"), false)
	if got := f.requestedCPU("n1"); got != 3000 {
		t.Fatalf("after bind, reservation holds %dm, want 3000m", got)
	}
	if got := f.store.boundOwners(r.UID, "n1"); len(got) != 1 || got[0].pod.Name != "p" {
		t.Fatalf("bound owners = %v", got)
	}
	// The owner goes away: its share returns to the reservation.
	f.store.observePod(allocated(p, r, "n1"), true)
	if got := f.requestedCPU("n1"); got != 4000 {
		t.Fatalf("after the owner left, reservation holds %dm, want 4000m", got)
	}
}

// A restarted scheduler sees pods and reservations in any order; the cache
// must end up the same either way (no double counting, nothing lost).
func TestRebuildIsOrderIndependent(t *testing.T) {
	r := makeReservation("r1", "4").Available("n1").AllocateOnce(false).Obj()
	p := allocated(ownerPod("p", "1"), r, "n1")
	want := int64(3000)

	a := newFixture(t, node("n1", "8"))
	a.store.upsert(r)
	a.store.observePod(p, false)

	b := newFixture(t, node("n1", "8"))
	b.store.observePod(p, false)
	b.store.upsert(r)

	if got := a.requestedCPU("n1"); got != want {
		t.Errorf("reservation first: reservation holds %dm, want %dm", got, want)
	}
	if got := b.requestedCPU("n1"); got != want {
		t.Errorf("pod first: reservation holds %dm, want %dm", got, want)
	}
}

func TestTerminalReservationReleasesCapacity(t *testing.T) {
	for _, phase := range []schedv1alpha1.ReservationPhase{schedv1alpha1.ReservationSucceeded, schedv1alpha1.ReservationFailed} {
		t.Run(string(phase), func(t *testing.T) {
			f := newFixture(t, node("n1", "4"))
			r := makeReservation("r1", "3").Available("n1").Obj()
			f.store.upsert(r)
			done := r.DeepCopy()
			done.Status.Phase = phase
			f.store.upsert(done)
			if got := f.requestedCPU("n1"); got != 0 {
				t.Errorf("%s reservation still holds %dm", phase, got)
			}
			if c := f.store.candidatesFor(ownerPod("p", "1")); len(c) != 0 {
				t.Errorf("%s reservation is still offered to owners", phase)
			}
		})
	}
}

// The scheduler assumes a reservation's pod when it places it; the
// informer's Available update must confirm it, not add it twice.
func TestAssumedReservationIsConfirmed(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	r := makeReservation("r1", "2").Obj()
	f.store.upsert(r)
	assumed := reservepod.New(r)
	assumed.Spec.NodeName = "n1"
	if err := f.cache.AssumePod(klog.Background(), assumed); err != nil {
		t.Fatal(err)
	}
	f.store.upsert(makeReservation("r1", "2").Available("n1").Obj())
	if got := f.requestedCPU("n1"); got != 2000 {
		t.Fatalf("requested = %dm, want 2000m", got)
	}
	if isAssumed, _ := f.cache.IsAssumedPod(assumed); isAssumed {
		t.Error("reservation is still only assumed after it became Available")
	}
	// Deleted while pending and assumed (bind in flight): the assumption is dropped.
	g := newFixture(t, node("n1", "4"))
	g.store.upsert(r)
	if err := g.cache.AssumePod(klog.Background(), assumed.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	g.store.remove(r)
	if got := g.requestedCPU("n1"); got != 0 {
		t.Errorf("deleted in flight: %dm still held", got)
	}
}

func TestFailedRequeuesOnlyPending(t *testing.T) {
	f := newFixture(t, node("n1", "4"))
	r := makeReservation("r1", "8").Obj()
	f.store.upsert(r)
	if _, ok := f.store.failed(r.UID, "0/1 nodes are available: 1 Insufficient cpu."); !ok {
		t.Fatal("pending reservation not requeued")
	}
	if got := f.store.unschedulableMessage(r.UID); got != "0/1 nodes are available: 1 Insufficient cpu." {
		t.Errorf("message = %q", got)
	}
	f.store.remove(r)
	if _, ok := f.store.failed(r.UID, "x"); ok {
		t.Error("a deleted reservation was requeued")
	}
}

// An owner is hinted to the node of a reservation that holds it whole, or
// to none: a reservation too small would only send it where the filters
// see less room than elsewhere.
func TestOwnedHintHoldsTheWholePod(t *testing.T) {
	f := newFixture(t, node("n1", "8"), node("n2", "8"))
	f.store.upsert(makeReservation("small", "1").Available("n1").Obj())
	f.store.upsert(makeReservation("big", "3").Available("n2").Obj())

	owns, req, hint := f.store.ownedHint(ownerPod("p", "2"))
	if !owns || hint != "n2" || req.Cpu().MilliValue() != 2000 {
		t.Errorf("ownedHint(2 CPU) = %v, %v, %q; want it owns, 2 CPU, hinted to n2 (big)", owns, req, hint)
	}
	if owns, _, hint := f.store.ownedHint(ownerPod("p", "4")); !owns || hint != "" {
		t.Errorf("ownedHint(4 CPU) = %v, %q; want it owns, no hint (no reservation holds 4 CPU)", owns, hint)
	}
	stranger := ownerPod("s", "1")
	stranger.Labels = nil
	if owns, req, hint := f.store.ownedHint(stranger); owns || req != nil || hint != "" {
		t.Errorf("ownedHint(non-owner) = %v, %v, %q; want nothing", owns, req, hint)
	}
}

// A booking bound for one node is told by that node's verdict; anything
// else keeps the scheduler's message.
func TestFailureMessageNamesTheBookedNode(t *testing.T) {
	statuses := framework.NewDefaultNodeToStatus()
	statuses.Set("n1", fwk.NewStatus(fwk.Unschedulable, "Insufficient cpu").WithPlugin("NodeResourcesFit"))
	statuses.Set("n2", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't match the requested node name").WithPlugin("NodeName"))
	fitErr := &framework.FitError{NumAllNodes: 2, Diagnosis: framework.Diagnosis{NodeToStatus: statuses}}
	status := fwk.NewStatus(fwk.Unschedulable, fitErr.Error())
	for _, tc := range []struct {
		name, node string
		fitErr     *framework.FitError
		want       string
	}{
		{"booked node", "n1", fitErr, "node n1: Insufficient cpu (NodeResourcesFit)"},
		{"any node", "", fitErr, status.Message()},
		{"no diagnosis", "n1", nil, status.Message()},
	} {
		if got := failureMessage(tc.node, status, tc.fitErr); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestSpentOwnerConsumes: an allocate-once reservation whose owner ran and
// finished before its status recorded the owner stays consumed, whichever
// of the two the store sees first (informer order after a restart); a
// shared one does not. A pod naming a reservation the store never sees
// leaves nothing behind once deleted.
func TestSpentOwnerConsumes(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	for _, tc := range []struct {
		name         string
		allocateOnce bool
		podFirst     bool
		want         bool
	}{
		{"allocate once, reservation first", true, false, true},
		{"allocate once, pod first", true, true, true},
		{"shared", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := makeReservation("r", "2").Available("n1").AllocateOnce(tc.allocateOnce).Obj()
			finished := allocated(ownerPod("p", "1"), r, "n1")
			finished.Status.Phase = v1.PodSucceeded
			s := newStore(logger)
			if tc.podFirst {
				s.observePod(finished, false)
				s.upsert(r)
			} else {
				s.upsert(r)
				s.observePod(finished, false)
			}
			if got := s.consumed(s.entries[r.UID]); got != tc.want {
				t.Errorf("consumed = %v, want %v", got, tc.want)
			}
			if owners := s.boundOwners(r.UID, "n1"); len(owners) != map[bool]int{true: 1}[tc.want] {
				t.Errorf("owners to record %v", owners)
			}
		})
	}

	s := newStore(logger)
	forged := allocated(ownerPod("p", "1"), makeReservation("never", "2").Obj(), "n1")
	forged.Status.Phase = v1.PodFailed
	s.observePod(forged, false)
	s.observePod(forged, true)
	if len(s.spent) != 0 || len(s.spentBy) != 0 {
		t.Errorf("a deleted pod naming an unknown reservation left spent %v, spentBy %v", s.spent, s.spentBy)
	}
}
