package asyncpreemption

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/test/wrappers"
)

// fakeHandle is the part of the framework handle the executor uses.
type fakeHandle struct {
	fwk.Handle
	client    kubernetes.Interface
	nominated []fwk.PodInfo

	mu          sync.Mutex
	activated   []string
	unnominated []string
}

func (h *fakeHandle) ClientSet() kubernetes.Interface           { return h.client }
func (h *fakeHandle) GetWaitingPod(types.UID) fwk.WaitingPod    { return nil }
func (h *fakeHandle) EventRecorder() events.EventRecorderLogger { return events.NewFakeRecorder(100) }
func (h *fakeHandle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range pods {
		h.activated = append(h.activated, k)
	}
}
func (h *fakeHandle) DeleteNominatedPodIfExists(p *v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unnominated = append(h.unnominated, p.Name)
}

func (h *fakeHandle) snapshot() (activated, unnominated []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.activated...), append([]string(nil), h.unnominated...)
}

type env struct {
	h       *fakeHandle
	client  *fake.Clientset
	exec    *executor
	clock   *testingclock.FakeClock
	deletes atomic.Int32
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	client := fake.NewSimpleClientset(objs...)
	h := &fakeHandle{client: client}
	e := &env{h: h, client: client, clock: testingclock.NewFakeClock(time.Now())}
	e.exec = newExecutor(h, 2, 5*time.Second)
	e.exec.clock = e.clock
	client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		e.deletes.Add(1)
		return false, nil, nil
	})
	return e
}

// victim is a pod of priority prio bound to n1.
func victim(name string, prio int32) *v1.Pod {
	return wrappers.MakePod(name, "ns").UID("uid-" + name).Priority(prio).NodeName("n1").Obj()
}

// preemptor is the pod the tests preempt for: priority 100, nominated to n1.
func preemptor() *v1.Pod {
	return nominated("high", 100)
}

// nominated is a pod of priority prio nominated to n1.
func nominated(name string, prio int32) *v1.Pod {
	return wrappers.MakePod(name, "ns").UID("uid-" + name).Priority(prio).NominatedNodeName("n1").Obj()
}

func TestPreemptionDeletesVictimsAndActivates(t *testing.T) {
	v1p, v2p := victim("v1", 1), victim("v2", 1)
	e := newEnv(t, v1p, v2p, preemptor())
	e.exec.start(preemptor(), "n1", []*v1.Pod{v1p, v2p})
	e.exec.wait()
	for _, name := range []string{"v1", "v2"} {
		if _, err := e.client.CoreV1().Pods("ns").Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("victim %s not deleted: %v", name, err)
		}
	}
	activated, unnominated := e.h.snapshot()
	if len(activated) != 1 || activated[0] != "ns/high" {
		t.Errorf("activated %v, want the preemptor once", activated)
	}
	if len(unnominated) != 0 {
		t.Errorf("a successful preemption cleared the nomination: %v", unnominated)
	}
	if e.exec.running("uid-high") {
		t.Error("the preemptor is still gated after its preemption finished")
	}
}

// A preemptor whose victims are already gone (#141694) is re-activated at
// once, not left waiting for the unschedulable flush.
func TestVictimsAlreadyGone(t *testing.T) {
	gone := victim("gone", 1)
	terminating := victim("terminating", 1)
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	e := newEnv(t, preemptor()) // neither victim exists any more
	e.exec.start(preemptor(), "n1", []*v1.Pod{gone, terminating})
	e.exec.wait()
	if activated, _ := e.h.snapshot(); len(activated) != 1 {
		t.Errorf("activated %v, want the preemptor", activated)
	}
	// The terminating victim is skipped; the gone one is found gone when
	// it is marked, so nothing is deleted.
	if n := e.deletes.Load(); n != 0 {
		t.Errorf("%d delete calls, want 0", n)
	}
}

// A failing delete stops the preemption, clears the nomination in memory
// and in status, and re-activates the preemptor only after a backoff.
func TestFailureClearsNominationAndBacksOff(t *testing.T) {
	victims := []*v1.Pod{victim("v1", 1), victim("v2", 1), victim("v3", 1), victim("v4", 1)}
	objs := []runtime.Object{preemptor()}
	for _, v := range victims {
		objs = append(objs, v)
	}
	e := newEnv(t, objs...)
	e.client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd is on fire"))
	})
	var statusPatches atomic.Int32
	e.client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && a.(clienttesting.PatchAction).GetName() == "high" {
			statusPatches.Add(1)
		}
		return false, nil, nil
	})
	e.exec.start(preemptor(), "n1", victims)
	e.exec.wait()

	if n := e.deletes.Load(); n > 2 {
		t.Errorf("%d delete calls after the first failure with 2 in flight at most; want the rest not started", n)
	}
	activated, unnominated := e.h.snapshot()
	if len(unnominated) != 1 {
		t.Errorf("nomination cleared in memory %v, want once", unnominated)
	}
	if statusPatches.Load() != 1 {
		t.Errorf("status.nominatedNodeName cleared %d times, want 1", statusPatches.Load())
	}
	if len(activated) != 0 {
		t.Errorf("re-activated before the backoff: %v", activated)
	}
	pl := &Plugin{exec: e.exec}
	if st := pl.PreEnqueue(t.Context(), preemptor()); st.IsSuccess() {
		t.Error("PreEnqueue let the preemptor through during its backoff (other events would requeue it at once)")
	}
	if e.exec.running("uid-high") {
		t.Error("the preemptor is still gated after its preemption failed")
	}
	e.clock.Step(time.Second)
	if activated, _ := e.h.snapshot(); len(activated) != 1 {
		t.Errorf("after the backoff, activated %v, want the preemptor", activated)
	}
	if st := pl.PreEnqueue(t.Context(), preemptor()); !st.IsSuccess() {
		t.Errorf("PreEnqueue after the backoff = %v, want success", st)
	}
}

// The backoff counts from when the preemption began, not from when its
// failure came back: a slow failing call is not added to the wait.
func TestBackoffCountsFromTheStart(t *testing.T) {
	v := victim("v", 1)
	e := newEnv(t, v, preemptor())
	e.client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		e.clock.Step(700 * time.Millisecond) // the failing call takes 0.7s
		return true, nil, apierrors.NewServiceUnavailable("victim deletes fail")
	})
	e.exec.start(preemptor(), "n1", []*v1.Pod{v})
	e.exec.wait()
	pl := &Plugin{exec: e.exec}
	if activated, _ := e.h.snapshot(); len(activated) != 0 {
		t.Fatalf("re-activated at once after the failure: %v", activated)
	}
	e.clock.Step(299 * time.Millisecond)
	if activated, _ := e.h.snapshot(); len(activated) != 0 {
		t.Errorf("re-activated 0.999s after the preemption began, before its 1s backoff: %v", activated)
	}
	if st := pl.PreEnqueue(t.Context(), preemptor()); st.IsSuccess() {
		t.Error("PreEnqueue let the preemptor through before its backoff ended")
	}
	e.clock.Step(time.Millisecond)
	if activated, _ := e.h.snapshot(); len(activated) != 1 {
		t.Errorf("1s after the preemption began (0.3s after its failure), activated %v, want the preemptor", activated)
	}
	if st := pl.PreEnqueue(t.Context(), preemptor()); !st.IsSuccess() {
		t.Errorf("PreEnqueue once the backoff ended = %v, want success", st)
	}
}

// A preemptor stays gated while its nomination is being cleared, even when
// its backoff has run out meanwhile: let through, it could be nominated
// again and the clearing would erase that.
func TestGatedWhileClearingTheNomination(t *testing.T) {
	v := victim("v", 1)
	e := newEnv(t, v, preemptor())
	e.client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("victim deletes fail")
	})
	clearing, release := make(chan struct{}), make(chan struct{})
	e.client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && a.(clienttesting.PatchAction).GetName() == "high" {
			close(clearing)
			<-release
		}
		return false, nil, nil
	})
	e.exec.start(preemptor(), "n1", []*v1.Pod{v})
	<-clearing
	e.clock.Step(2 * time.Second) // past the first backoff (1s)
	pl := &Plugin{exec: e.exec}
	if st := pl.PreEnqueue(t.Context(), preemptor()); st.IsSuccess() {
		t.Error("PreEnqueue let the preemptor through while its nomination was being cleared")
	}
	close(release)
	e.exec.wait()
	if st := pl.PreEnqueue(t.Context(), preemptor()); !st.IsSuccess() {
		t.Errorf("PreEnqueue once the nomination is cleared and the backoff over = %v, want success", st)
	}
	e.clock.Step(0) // the fake clock fires a timer of 0s on its next step
	if activated, _ := e.h.snapshot(); len(activated) != 1 {
		t.Errorf("activated %v once the nomination was cleared after the backoff, want the preemptor", activated)
	}
}

// Two preemptions that pick the same victim delete it once.
func TestNoDoubleDelete(t *testing.T) {
	v := victim("v", 1)
	e := newEnv(t, v, preemptor())
	release := make(chan struct{})
	e.client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-release // the first delete is slow
		return false, nil, nil
	})
	e.exec.start(preemptor(), "n1", []*v1.Pod{v})
	other := preemptor()
	other.Name, other.UID = "high2", "uid-high2"
	e.exec.start(other, "n1", []*v1.Pod{v})
	close(release)
	e.exec.wait()
	if n := e.deletes.Load(); n != 1 {
		t.Errorf("victim deleted %d times, want 1", n)
	}
	if activated, _ := e.h.snapshot(); len(activated) != 2 {
		t.Errorf("activated %v, want both preemptors", activated)
	}
}

// The executor gates a preemptor while its work runs.
func TestPreEnqueueGatesWhileInFlight(t *testing.T) {
	v := victim("v", 1)
	e := newEnv(t, v, preemptor())
	release := make(chan struct{})
	e.client.PrependReactor("delete", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	pl := &Plugin{exec: e.exec}
	e.exec.start(preemptor(), "n1", []*v1.Pod{v})
	if st := pl.PreEnqueue(t.Context(), preemptor()); st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Errorf("PreEnqueue while in flight = %v, want UnschedulableAndUnresolvable", st)
	}
	close(release)
	e.exec.wait()
	if st := pl.PreEnqueue(t.Context(), preemptor()); !st.IsSuccess() {
		t.Errorf("PreEnqueue after the preemption = %v, want success", st)
	}
}

func (h *fakeHandle) NominatedPodsForNode(string) []fwk.PodInfo { return h.nominated }

// Lower-priority pods nominated to the target node lose their nomination,
// as upstream does; higher ones keep it.
func TestLowerNominationsCleared(t *testing.T) {
	v := victim("v", 1)
	lower, higher := nominated("lower", 5), nominated("higher", 500)
	e := newEnv(t, v, preemptor(), lower, higher)
	for _, p := range []*v1.Pod{lower, higher} {
		pi, _ := framework.NewPodInfo(p)
		e.h.nominated = append(e.h.nominated, pi)
	}
	var cleared []string
	var mu sync.Mutex
	e.client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			mu.Lock()
			cleared = append(cleared, a.(clienttesting.PatchAction).GetName())
			mu.Unlock()
		}
		return false, nil, nil
	})
	e.exec.start(preemptor(), "n1", []*v1.Pod{v})
	e.exec.wait()
	mu.Lock()
	defer mu.Unlock()
	// "v" gets its DisruptionTarget condition through a status patch too.
	want := map[string]bool{"lower": true, "v": true}
	for _, name := range cleared {
		if !want[name] {
			t.Errorf("status of %s patched", name)
		}
		delete(want, name)
	}
	if want["lower"] {
		t.Error("the lower-priority nomination was not cleared")
	}
}

// A successful preemption keeps its preemptor gated until the victims have
// left the scheduler's cache: re-activated before, it would fail a cycle on
// the room they still hold and be backed off.
func TestPreemptorGatedUntilVictimsLeaveTheCache(t *testing.T) {
	v := victim("v", 1)
	e := newEnv(t, v, preemptor())
	var left atomic.Bool
	e.exec.inCache = func(p *v1.Pod) bool { return p.UID == v.UID && !left.Load() }
	e.exec.start(preemptor(), "n1", []*v1.Pod{v})
	deadline := time.Now().Add(5 * time.Second)
	for e.deletes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if activated, _ := e.h.snapshot(); len(activated) != 0 || !e.exec.running("uid-high") {
		t.Fatalf("preemptor released (activated %v, gated %v) while its victim is still cached", activated, e.exec.running("uid-high"))
	}
	left.Store(true)
	e.exec.wait()
	if activated, _ := e.h.snapshot(); len(activated) != 1 || e.exec.running("uid-high") {
		t.Errorf("after the victim left: activated %v, gated %v", activated, e.exec.running("uid-high"))
	}
}

// A victim deleted with no grace period is waited for: kube-apiserver
// writes its deletion timestamp and removes it a moment later. One with a
// grace period or a finalizer may stay for long, and is not.
func TestAboutToLeave(t *testing.T) {
	now := metav1.Now()
	terminating := func(grace *int64, finalizers ...string) *v1.Pod {
		p := victim("v", 1)
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.Finalizers = &now, grace, finalizers
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want bool
	}{
		{"running", victim("v", 1), true},
		{"deleted with no grace period", terminating(ptr.To[int64](0)), true},
		{"deletion timestamp without a grace period recorded", terminating(nil), true},
		{"deleted with a grace period", terminating(ptr.To[int64](30)), false},
		{"held by a finalizer", terminating(ptr.To[int64](0), "example.com/hold"), false},
	} {
		if got := aboutToLeave(tc.pod); got != tc.want {
			t.Errorf("%s: aboutToLeave = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFailuresPrunedForGonePreemptors: the executor remembers nothing of
// preemptors that are not pending any more. 10k preemptors fail to preempt,
// then are deleted or bound elsewhere; after a prune their failures and
// last preemptions are forgotten, while a pending preemptor keeps its
// backoff count.
func TestFailuresPrunedForGonePreemptors(t *testing.T) {
	const n = 10000
	e := newEnv(t)
	// Marking a victim as a disruption target fails: the preemption fails.
	e.client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if strings.HasPrefix(a.(clienttesting.PatchAction).GetName(), "v-") {
			return true, nil, apierrors.NewInternalError(errors.New("etcd is on fire"))
		}
		return false, nil, nil
	})
	gone := map[types.UID]bool{}
	e.exec.preemptorGone = func(_, _ string, uid types.UID) bool { return gone[uid] }
	for i := range n + 1 {
		p := nominated(fmt.Sprintf("p-%d", i), 100)
		e.exec.start(p, "n1", []*v1.Pod{victim(fmt.Sprintf("v-%d", i), 1)})
	}
	e.exec.wait()
	e.exec.mu.Lock()
	// A successful preemption of one more preemptor, to have a recent entry.
	e.exec.recent["uid-p-0"] = recentPreemption{namespace: "ns", name: "p-0", at: e.clock.Now()}
	if got := len(e.exec.failures); got != n+1 {
		t.Fatalf("%d failures recorded, want %d", got, n+1)
	}
	e.exec.mu.Unlock()

	for i := range n {
		gone[types.UID(fmt.Sprintf("uid-p-%d", i))] = true
	}
	e.clock.Step(pruneInterval)
	e.exec.mu.Lock()
	e.exec.prune()
	failures, recent := len(e.exec.failures), len(e.exec.recent)
	pending := e.exec.failures[types.UID(fmt.Sprintf("uid-p-%d", n))]
	e.exec.mu.Unlock()
	if failures != 1 || recent != 0 {
		t.Errorf("after a prune: %d failures and %d recent preemptions, want only the pending preemptor's failure", failures, recent)
	}
	if pending.count != 1 {
		t.Errorf("the pending preemptor's failure count is %d, want 1", pending.count)
	}

	// Its failures are forgotten too once it has not failed for a while.
	e.clock.Step(failureMemory)
	e.exec.mu.Lock()
	e.exec.prune()
	failures = len(e.exec.failures)
	e.exec.mu.Unlock()
	if failures != 0 {
		t.Errorf("%d failures remembered %s after the last one, want 0", failures, failureMemory+pruneInterval)
	}
}

func TestPreemptorGone(t *testing.T) {
	pending := wrappers.MakePod("pending", "ns").UID("u1").Obj()
	bound := wrappers.MakePod("bound", "ns").UID("u2").NodeName("n2").Obj()
	recreated := wrappers.MakePod("recreated", "ns").UID("u3-new").Obj()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*v1.Pod{pending, bound, recreated} {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	gone := preemptorGone(corelisters.NewPodLister(indexer))
	for _, tc := range []struct {
		name string
		uid  types.UID
		want bool
	}{
		{"pending", "u1", false},
		{"bound", "u2", true},
		{"recreated", "u3", true},
		{"deleted", "u4", true},
	} {
		if got := gone("ns", tc.name, tc.uid); got != tc.want {
			t.Errorf("%s: gone = %v, want %v", tc.name, got, tc.want)
		}
	}
}
