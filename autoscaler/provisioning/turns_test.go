package provisioning

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

func nsKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// started waits (a little) for tk's turn to come, and says whether it did.
func started(tk *ticket) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	return tk.wait(ctx) == nil
}

// waiting starts tk's wait in the background; the channel is closed when
// its turn comes.
func waiting(t *testing.T, tk *ticket) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		if err := tk.wait(t.Context()); err == nil {
			close(done)
		}
	}()
	// The ticket is in its namespace's queue once wait has taken the lock.
	deadline := time.Now().Add(time.Second)
	for {
		tk.t.mu.Lock()
		state := tk.state
		tk.t.mu.Unlock()
		if state != ticketIdle || time.Now().After(deadline) {
			return done
		}
		time.Sleep(time.Millisecond)
	}
}

func enter(t *testing.T, tr *turns, k types.NamespacedName) *ticket {
	t.Helper()
	tk, err := tr.enter(k)
	if err != nil {
		t.Fatalf("enter %v: %v", k, err)
	}
	return tk
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-time.After(200 * time.Millisecond):
		return false
	}
}

// With one instance, a namespace that queued three requests first does not
// get its second turn before another namespace's first.
func TestTurnsServeNamespacesInTurn(t *testing.T) {
	tr := newTurns(1, func(types.NamespacedName) {})
	a1, a2, a3 := enter(t, tr, nsKey("a", "1")), enter(t, tr, nsKey("a", "2")), enter(t, tr, nsKey("a", "3"))
	b1 := enter(t, tr, nsKey("b", "1"))
	if !started(a1) {
		t.Fatal("a1 has no turn on a free instance")
	}
	a2c, a3c := waiting(t, a2), waiting(t, a3)
	b1c := waiting(t, b1)
	a1.done()
	if !isClosed(b1c) {
		t.Fatal("b waited for a's second request")
	}
	if isClosed(a2c) {
		t.Fatal("a's second request ran beside b's on one instance")
	}
	b1.done()
	if !isClosed(a2c) {
		t.Fatal("a2 did not run after b")
	}
	a2.done()
	if !isClosed(a3c) {
		t.Fatal("a3 did not run")
	}
	a3.done()
	if tr.free != 1 || len(tr.tickets) != 0 || len(tr.waiting) != 0 || tr.running.Len() != 0 {
		t.Errorf("turns not back to rest: free %d, tickets %v, waiting %v, running %v", tr.free, tr.tickets, tr.waiting, tr.running)
	}
}

// A namespace simulates one request at a time, even with instances free;
// a ticket that yields may wait again, behind the namespaces waiting.
func TestTurnsOneInstancePerNamespace(t *testing.T) {
	tr := newTurns(3, func(types.NamespacedName) {})
	a1, a2 := enter(t, tr, nsKey("a", "1")), enter(t, tr, nsKey("a", "2"))
	if !started(a1) {
		t.Fatal("a1 has no turn")
	}
	a2c := waiting(t, a2)
	if isClosed(a2c) {
		t.Fatal("two requests of one namespace simulate at once")
	}
	b1 := enter(t, tr, nsKey("b", "1"))
	if !started(b1) {
		t.Fatal("b1 waits with instances free")
	}
	a1.yield()
	if !isClosed(a2c) {
		t.Fatal("a2 did not run when a1 yielded")
	}
	a1c := waiting(t, a1)
	a2.done()
	if !isClosed(a1c) {
		t.Fatal("a1 did not get its turn again")
	}
	a1.done()
	b1.done()
	if tr.free != 3 {
		t.Errorf("free instances: %d", tr.free)
	}
}

// Past maxQueuedPerNamespace+1 tickets, a namespace's requests are put
// back, once each, and woken one per ticket given back.
func TestTurnsPutBackAndWake(t *testing.T) {
	var woken []types.NamespacedName
	tr := newTurns(1, func(k types.NamespacedName) { woken = append(woken, k) })
	var held []*ticket
	for i := range maxQueuedPerNamespace + 1 {
		held = append(held, enter(t, tr, nsKey("a", string(rune('0'+i)))))
	}
	for _, k := range []types.NamespacedName{nsKey("a", "x"), nsKey("a", "y"), nsKey("a", "x")} {
		if _, err := tr.enter(k); !errors.Is(err, errPutBack) {
			t.Fatalf("%v: %v, want it put back", k, err)
		}
	}
	if _, err := tr.enter(nsKey("b", "1")); err != nil {
		t.Fatalf("another namespace is put back: %v", err)
	}
	held[0].done()
	held[0].done() // a second call gives nothing back
	held[1].done()
	if len(woken) != 2 || woken[0] != nsKey("a", "x") || woken[1] != nsKey("a", "y") {
		t.Fatalf("woken: %v, want a/x then a/y", woken)
	}
	held[2].done()
	if len(woken) != 2 {
		t.Errorf("woken with nothing put back: %v", woken)
	}
}

// A wait given up leaves the queue and its instance to others.
func TestTurnsWaitCancelled(t *testing.T) {
	tr := newTurns(1, func(types.NamespacedName) {})
	a := enter(t, tr, nsKey("a", "1"))
	if !started(a) {
		t.Fatal("no turn")
	}
	b := enter(t, tr, nsKey("b", "1"))
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- b.wait(ctx) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait: %v", err)
	}
	b.done()
	c := enter(t, tr, nsKey("c", "1"))
	cc := waiting(t, c)
	a.done()
	if !isClosed(cc) {
		t.Fatal("the instance did not pass to c")
	}
	c.done()
	if tr.free != 1 || len(tr.waiting) != 0 || len(tr.tickets) != 0 {
		t.Errorf("turns not back to rest: free %d, waiting %v, tickets %v", tr.free, tr.waiting, tr.tickets)
	}
}

// A commit takes a simulation's room when it is on one of its nodes, or
// when either side's pods depend on other nodes, or both have claims.
func TestCommitLogTaken(t *testing.T) {
	var l commitLog
	n := func(names ...string) sets.Set[string] { return sets.New(names...) }
	plain := placementShape{}
	gen := l.gen
	if l.taken(gen, n("n1"), placementShape{crossNode: true}) {
		t.Error("taken with no commit since")
	}
	l.add(n("n1", "n2"), plain)
	cases := []struct {
		name  string
		nodes sets.Set[string]
		shape placementShape
		want  bool
	}{
		{"other nodes", n("n3"), plain, false},
		{"same node", n("n2", "n3"), plain, true},
		{"cross-node simulation", n("n3"), placementShape{crossNode: true}, true},
		{"claims beside a commit without", n("n3"), placementShape{claims: true}, false},
	}
	for _, tc := range cases {
		if got := l.taken(gen, tc.nodes, tc.shape); got != tc.want {
			t.Errorf("%s: taken %v, want %v", tc.name, got, tc.want)
		}
	}
	if l.taken(l.gen, n("n1"), plain) {
		t.Error("a simulation after the commit counts it as taken")
	}
	gen = l.gen
	l.add(n("n9"), placementShape{claims: true})
	if !l.taken(gen, n("n3"), placementShape{claims: true}) || l.taken(gen, n("n3"), plain) {
		t.Error("claims commit")
	}
	gen = l.gen
	l.add(n("n9"), placementShape{crossNode: true})
	if !l.taken(gen, n("n3"), plain) {
		t.Error("a cross-node commit does not take a plain simulation's room")
	}
	// Commits forgotten count as taken.
	old := l.gen
	for range maxCommits + 1 {
		l.add(n("far"), plain)
	}
	if !l.taken(old, n("n3"), plain) {
		t.Error("a simulation older than the log's commits is not done again")
	}
	if len(l.entries) != maxCommits {
		t.Errorf("the log keeps %d commits", len(l.entries))
	}
}
