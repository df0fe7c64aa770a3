package provisioning

import (
	"context"
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Simulations are handed out in turns (turns), so that no namespace's
// requests hold up another's, and booked under bookMu only for the commit
// (commitLog), so that a simulation never waits for another.
//
// A request that is about to simulate takes a ticket for its namespace; a
// namespace holds at most maxQueuedPerNamespace+1 of them, and a request
// that finds them all taken is put back (requeued) and woken when one is
// given back. A ticket waits for its turn: a namespace simulates one
// request at a time, on one of the simulator's instances, and when an
// instance is free, the namespace waiting whose last turn is the oldest
// has the next one. A namespace with thousands of expensive requests thus
// takes one instance in turn with every other namespace, and its requests
// beyond the few with tickets cost nothing until then.

// maxQueuedPerNamespace is how many of a namespace's requests may wait for
// its turn beside the one simulating.
const maxQueuedPerNamespace = 2

// errPutBack: the namespace's requests hold every ticket they may; the
// request is woken when one is given back.
var errPutBack = errors.New("the namespace's requests are simulated in turn; this one waits for a turn")

// turns hands the simulator's instances to namespaces in turn.
type turns struct {
	mu sync.Mutex
	// free is how many instances no turn holds.
	free int
	// waiting are the tickets waiting for a turn, per namespace, in order.
	waiting map[string][]*ticket
	// running are the namespaces with a turn.
	running sets.Set[string]
	// tickets is how many tickets each namespace holds.
	tickets map[string]int
	// served is when (a sequence number) each namespace last had a turn.
	served map[string]uint64
	seq    uint64
	// putBack are the requests put back, per namespace, in order.
	putBack map[string][]types.NamespacedName
	// wake brings a request put back to the controller's queue again.
	wake func(types.NamespacedName)
}

func newTurns(instances int, wake func(types.NamespacedName)) *turns {
	return &turns{
		free: max(instances, 1), waiting: map[string][]*ticket{}, running: sets.New[string](),
		tickets: map[string]int{}, served: map[string]uint64{}, putBack: map[string][]types.NamespacedName{}, wake: wake,
	}
}

// ticket is a request's place in its namespace's turns. It is used by one
// goroutine: wait, then yield, any number of times, then done (once or
// more).
type ticket struct {
	t         *turns
	namespace string
	// ready is closed when the ticket's turn comes.
	ready chan struct{}
	state ticketState
	// given: done was called.
	given bool
}

type ticketState int

const (
	ticketIdle ticketState = iota
	ticketWaiting
	ticketRunning
)

// enter gives key's request a ticket, or errPutBack when its namespace's
// requests hold all they may (key is then woken when one is given back).
func (t *turns) enter(key types.NamespacedName) (*ticket, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ns := key.Namespace
	if t.tickets[ns] > maxQueuedPerNamespace {
		for _, k := range t.putBack[ns] {
			if k == key {
				return nil, errPutBack
			}
		}
		t.putBack[ns] = append(t.putBack[ns], key)
		return nil, errPutBack
	}
	t.tickets[ns]++
	return &ticket{t: t, namespace: ns}, nil
}

// wait returns when the ticket has a turn, or ctx's error.
func (tk *ticket) wait(ctx context.Context) error {
	t := tk.t
	t.mu.Lock()
	if tk.state == ticketIdle {
		tk.ready, tk.state = make(chan struct{}), ticketWaiting
		t.waiting[tk.namespace] = append(t.waiting[tk.namespace], tk)
		t.dispatch()
	}
	ready := tk.ready
	t.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		if tk.state == ticketRunning {
			// The turn came as ctx ended: given up.
			t.endTurn(tk)
		} else {
			t.unqueue(tk)
		}
		return context.Cause(ctx)
	}
}

// yield ends the ticket's turn; the ticket may wait for another.
func (tk *ticket) yield() {
	t := tk.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk.state == ticketRunning {
		t.endTurn(tk)
	}
}

// done gives the ticket back, ending its turn or its wait, and wakes a
// request of its namespace that was put back. Calls after the first do
// nothing.
func (tk *ticket) done() {
	t := tk.t
	t.mu.Lock()
	if tk.given {
		t.mu.Unlock()
		return
	}
	tk.given = true
	switch tk.state {
	case ticketRunning:
		t.endTurn(tk)
	case ticketWaiting:
		t.unqueue(tk)
	}
	ns := tk.namespace
	if t.tickets[ns]--; t.tickets[ns] <= 0 {
		delete(t.tickets, ns)
	}
	var wake []types.NamespacedName
	if keys := t.putBack[ns]; len(keys) > 0 {
		wake = keys[:1]
		if t.putBack[ns] = keys[1:]; len(t.putBack[ns]) == 0 {
			delete(t.putBack, ns)
		}
	}
	t.mu.Unlock()
	for _, k := range wake {
		t.wake(k)
	}
}

// endTurn frees the ticket's instance for the next turn. t.mu is held.
func (t *turns) endTurn(tk *ticket) {
	tk.state = ticketIdle
	t.running.Delete(tk.namespace)
	t.free++
	t.dispatch()
}

// unqueue takes a waiting ticket out of its namespace's queue. t.mu is
// held.
func (t *turns) unqueue(tk *ticket) {
	tk.state = ticketIdle
	q := t.waiting[tk.namespace]
	for i, other := range q {
		if other == tk {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(t.waiting, tk.namespace)
	} else {
		t.waiting[tk.namespace] = q
	}
}

// dispatch gives the free instances to the waiting namespaces without a
// turn, the one served longest ago first. t.mu is held.
func (t *turns) dispatch() {
	for t.free > 0 {
		next, found := "", false
		for ns := range t.waiting {
			if t.running.Has(ns) {
				continue
			}
			if !found || t.served[ns] < t.served[next] || (t.served[ns] == t.served[next] && ns < next) {
				next, found = ns, true
			}
		}
		if !found {
			return
		}
		q := t.waiting[next]
		tk := q[0]
		if len(q) == 1 {
			delete(t.waiting, next)
		} else {
			t.waiting[next] = q[1:]
		}
		t.seq++
		t.served[next] = t.seq
		t.running.Insert(next)
		t.free--
		tk.state = ticketRunning
		close(tk.ready)
	}
}

// maxCommits is how many commits commitLog remembers: a simulation that
// started before the oldest of them is done again.
const maxCommits = 256

// commitLog records the bookings committed (assumed under bookMu), so that
// a booking simulated without the lock can be checked against those made
// since its snapshot. Its methods are called under bookMu.
type commitLog struct {
	// gen counts the commits.
	gen     uint64
	entries []commitEntry
}

type commitEntry struct {
	gen   uint64
	nodes sets.Set[string]
	shape placementShape
}

// placementShape says which other placements a placement of pods depends
// on, beyond the nodes it uses.
type placementShape struct {
	// crossNode: pods whose room depends on pods of other nodes
	// (simulator.CrossNode): any booking changes it, and a booking of them
	// changes any other's.
	crossNode bool
	// claims: pods with resource claims, which take devices that others
	// with claims may want on any node.
	claims bool
}

func (a placementShape) dependsOn(b placementShape) bool {
	return a.crossNode || b.crossNode || (a.claims && b.claims)
}

// add records a commit of a booking on nodes.
func (l *commitLog) add(nodes sets.Set[string], shape placementShape) {
	l.gen++
	l.entries = append(l.entries, commitEntry{gen: l.gen, nodes: nodes, shape: shape})
	if len(l.entries) > maxCommits {
		l.entries = append(l.entries[:0:0], l.entries[len(l.entries)-maxCommits:]...)
	}
}

// taken says whether a booking on nodes, of pods of shape, simulated on a
// snapshot taken at generation since, may have lost its room to a commit
// made after it.
func (l *commitLog) taken(since uint64, nodes sets.Set[string], shape placementShape) bool {
	if since == l.gen {
		return false
	}
	if len(l.entries) == 0 || l.entries[0].gen > since+1 {
		return true // commits since then are forgotten
	}
	for _, e := range l.entries {
		if e.gen <= since {
			continue
		}
		if shape.dependsOn(e.shape) || overlap(e.nodes, nodes) {
			return true
		}
	}
	return false
}

func overlap(a, b sets.Set[string]) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	for n := range a {
		if b.Has(n) {
			return true
		}
	}
	return false
}
