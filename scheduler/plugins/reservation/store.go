package reservation

import (
	"encoding/json"
	"sort"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	apiresource "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// store is the Reservation plugin's state, shared by the plugin's instances
// in every profile of the process. It is rebuilt from informers alone: the
// reservations, and the bound pods that carry AnnotationAllocated. The store
// puts pending reservations into the scheduling queue and Available ones,
// less what their owners took, into the scheduler's cache, so that every
// plugin, in-tree or not, counts reserved capacity as used.
//
// Its methods are in a file per concern:
//   - store.go: what the store knows (reservations, owner pods' allocations,
//     scheduling failures) and how informer events change it;
//   - candidates.go: what owner pods' scheduling cycles ask of it: hints,
//     the reservations an owner may use on a node, and claims;
//   - preemption.go: the nominations of preempting reservations and the
//     check of owner pods' allocations, which it provides to AsyncPreemption
//     (reservepod.Provider);
//   - mirror.go: how it drives the scheduler's cache and queue;
//   - services.go: its REST view.
type store struct {
	mu      sync.RWMutex
	logger  klog.Logger
	entries map[types.UID]*entry
	byNode  map[string]map[*entry]bool
	owners  *ownerIndex
	// allocs are the bound owner pods by reservation UID, from the pod
	// informer; podToResv finds a pod's reservation when it goes away.
	allocs    map[types.UID]map[types.UID]allocation
	podToResv map[types.UID]types.UID
	// spent is, by reservation UID, the first owner seen placed in it that
	// has since finished or been deleted: it no longer counts against the
	// reservation, but an allocate-once reservation stays consumed by it
	// (entry.holds still checks it), whether or not its status recorded
	// the owner before it went (it may run in less time than a status
	// update takes, or finish while the scheduler is down). spentBy finds
	// the entry a pod made, to forget it with the pod while its
	// reservation is unknown.
	spent   map[types.UID]allocation
	spentBy map[types.UID]types.UID

	// nominated: pending reservations that preempted, by UID, and the node
	// their victims are leaving. Other pods' filters count them there as
	// upstream counts nominated pods; the scheduler's nominator cannot hold
	// them (it looks every nominee up among the Pods).
	nominated map[types.UID]string

	cache    podCache
	queue    podQueue
	profiles sets.Set[string] // scheduler names whose profile runs the plugin

	// notify tells the status controller that a reservation needs a look.
	notify func(name string)
}

func newStore(logger klog.Logger) *store {
	return &store{
		logger:    logger,
		entries:   map[types.UID]*entry{},
		byNode:    map[string]map[*entry]bool{},
		owners:    newOwnerIndex(),
		allocs:    map[types.UID]map[types.UID]allocation{},
		podToResv: map[types.UID]types.UID{},
		spent:     map[types.UID]allocation{},
		spentBy:   map[types.UID]types.UID{},
		nominated: map[types.UID]string{},
		profiles:  sets.New[string](),
		notify:    func(string) {},
	}
}

func (s *store) setNotify(fn func(string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notify = fn
}

// allocation is an owner pod placed in a reservation.
type allocation struct {
	pod      types.NamespacedName
	uid      types.UID
	node     string
	requests v1.ResourceList
	// obj is the pod as the informer last had it (read-only), for checking
	// a recorded allocation against the live reservation (entry.holds);
	// nil for the scheduler's own in-cycle claims.
	obj *v1.Pod
}

// entry is the store's view of one reservation (by UID: a name can be reused).
type entry struct {
	r      *schedv1alpha1.Reservation
	owners []compiledOwner
	pod    *v1.Pod // the reserve pod, template shape
	// pending are owner pods reserved into it by a scheduling cycle and not
	// yet seen bound; they are only known to this scheduler.
	pending map[types.UID]allocation
	queued  bool   // the reserve pod was handed to the scheduling queue
	indexed bool   // in byNode and the owner index: owners may use it
	node    string // the byNode key it is indexed under
	// live is what an indexed reservation holds for its owners, as the
	// scheduler's cache has it; read-only once set (owners' cycles share it).
	live *v1.Pod
	// unschedulable is the last scheduling failure, for the status controller.
	unschedulable string
	// adjusted is the last copy of its node made without it for an owner.
	adjusted atomic.Pointer[adjustedNode]
}

func (e *entry) phase() schedv1alpha1.ReservationPhase {
	if e.r.Status.Phase == "" {
		return schedv1alpha1.ReservationPending
	}
	return e.r.Status.Phase
}

// ownedBy reports whether one of the reservation's owners selects pod.
func (e *entry) ownedBy(pod *v1.Pod) bool {
	for i := range e.owners {
		if e.owners[i].matches(pod) {
			return true
		}
	}
	return false
}

func (e *entry) allocateOnce() bool {
	return AllocateOnce(e.r)
}

// holds reports whether a bound pod's allocation annotation is borne out by
// the live reservation: the pod is one of its owners and is bound to its
// node. The annotation is tenant-writable (any pod creator can set it, and
// it stays mutable after binding), so it is only a pointer to the
// reservation; a pod that fails these checks is not placed in it: it is not
// counted against the reservation and keeps its own priority as a victim.
// Checked on use, not when the pod is seen, because the reservation may be
// seen after its owners (informer order) and its owners may change.
func (e *entry) holds(a allocation) bool {
	if a.obj == nil || e.r.Status.NodeName == "" || a.node != e.r.Status.NodeName {
		return false
	}
	for _, o := range e.owners {
		if o.matches(a.obj) {
			return true
		}
	}
	return false
}

// heldAllocs are the bound owner pods whose annotation names e and that e
// holds (entry.holds). Callers hold s.mu.
func (s *store) heldAllocs(e *entry, fn func(a allocation)) {
	for _, a := range s.allocs[e.r.UID] {
		if e.holds(a) {
			fn(a)
		}
	}
}

// upsert records the latest version of a reservation.
func (s *store) upsert(r *schedv1alpha1.Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[r.UID]
	if e == nil {
		e = &entry{pending: map[types.UID]allocation{}}
		s.entries[r.UID] = e
	} else {
		reservationsByPhase.WithLabelValues(string(e.phase())).Dec()
	}
	defer func() { reservationsByPhase.WithLabelValues(string(e.phase())).Inc() }()
	if e.r == nil || e.r.Generation != r.Generation {
		owners, err := compileOwners(r.Spec.Owners)
		if err != nil {
			// The CRD validates selectors; one that still does not compile
			// selects nobody rather than everybody.
			s.logger.Error(err, "Reservation owners do not compile; no pod can use it", "reservation", klog.KObj(r))
			owners = nil
		}
		if e.indexed {
			s.unindex(e)
		}
		e.owners = owners
	}
	e.r = r
	e.pod = reservepod.New(r)
	s.reconcile(e)
	s.notify(r.Name)
}

// remove forgets a deleted reservation and releases its capacity at once.
func (s *store) remove(r *schedv1alpha1.Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[r.UID]
	if e == nil {
		return
	}
	delete(s.entries, r.UID)
	reservationsByPhase.WithLabelValues(string(e.phase())).Dec()
	if e.indexed {
		s.unindex(e)
	}
	if e.queued && s.queue != nil {
		s.queue.Delete(s.logger, e.pod)
		e.queued = false
	}
	s.uncache(e.pod)
	delete(s.allocs, r.UID)
	delete(s.spent, r.UID)
	delete(s.nominated, r.UID)
}

// observePod records a pod's allocation from its annotation: bound, live
// pods count; anything else (unbound, finished, deleted) does not. What is
// recorded is only a claim: it counts against the reservation once the
// reservation holds it (entry.holds: an owner on its node). A bound owner
// that finishes or is deleted is kept as the reservation's spent owner
// (store.spent), which consumes an allocate-once reservation.
func (s *store) observePod(p *v1.Pod, deleted bool) {
	var resv types.UID
	var alloc *schedv1alpha1.ReservationAllocation
	if v, ok := p.Annotations[schedv1alpha1.AnnotationAllocated]; ok && !deleted {
		a := &schedv1alpha1.ReservationAllocation{}
		if err := json.Unmarshal([]byte(v), a); err == nil && a.UID != "" {
			alloc, resv = a, a.UID
		}
	}
	finished := p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	counts := alloc != nil && p.Spec.NodeName != "" && !finished

	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.podToResv[p.UID]; ok && (!counts || prev != resv) {
		delete(s.podToResv, p.UID)
		if m := s.allocs[prev]; m != nil {
			if a, ok := m[p.UID]; ok && (deleted || finished && prev == resv) {
				s.spend(prev, a)
			}
			delete(m, p.UID)
			if len(m) == 0 {
				delete(s.allocs, prev)
			}
		}
		s.touch(prev)
	}
	if !counts {
		if deleted {
			s.forgetSpent(p.UID)
		}
		if alloc != nil && p.Spec.NodeName != "" && finished {
			s.spend(resv, allocation{pod: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, uid: p.UID, node: p.Spec.NodeName,
				requests: apiresource.PodRequests(p, apiresource.PodResourcesOptions{}), obj: p})
			s.touch(resv)
		}
		return
	}
	m := s.allocs[resv]
	if m == nil {
		m = map[types.UID]allocation{}
		s.allocs[resv] = m
	}
	m[p.UID] = allocation{
		pod:      types.NamespacedName{Namespace: p.Namespace, Name: p.Name},
		uid:      p.UID,
		node:     p.Spec.NodeName,
		requests: apiresource.PodRequests(p, apiresource.PodResourcesOptions{}),
		obj:      p,
	}
	s.podToResv[p.UID] = resv
	if e := s.entries[resv]; e != nil {
		delete(e.pending, p.UID) // the scheduler's in-cycle claim is now on record
	}
	s.touch(resv)
}

// spend records a that finished or went away as reservation resv's spent
// owner, unless it has one. The reservation may not be known yet (informer
// order after a restart): the record waits for it, and goes with the pod
// if the reservation is still unknown then (the annotation is
// tenant-writable; a pod naming no reservation leaves nothing behind).
// Callers hold s.mu.
func (s *store) spend(resv types.UID, a allocation) {
	if _, ok := s.spent[resv]; ok {
		return
	}
	s.spent[resv] = a
	s.spentBy[a.uid] = resv
}

// forgetSpent drops what pod uid, now deleted, spent in a reservation the
// store does not know. Callers hold s.mu.
func (s *store) forgetSpent(uid types.UID) {
	resv, ok := s.spentBy[uid]
	if !ok {
		return
	}
	delete(s.spentBy, uid)
	if s.entries[resv] == nil && s.spent[resv].uid == uid {
		delete(s.spent, resv)
	}
}

func (s *store) touch(resv types.UID) {
	if e := s.entries[resv]; e != nil {
		s.reconcile(e)
		s.notify(e.r.Name)
	}
}

// consumed: an allocate-once reservation with an owner placed in it.
func (s *store) consumed(e *entry) bool {
	if !e.allocateOnce() {
		return false
	}
	if len(e.pending) > 0 || len(e.r.Status.CurrentOwners) > 0 {
		return true
	}
	held := false
	s.heldAllocs(e, func(allocation) { held = true })
	if a, ok := s.spent[e.r.UID]; ok && e.holds(a) {
		held = true
	}
	return held
}

// remaining is what the reservation still holds for its owners.
func (s *store) remaining(e *entry) v1.ResourceList {
	var used []v1.ResourceList
	s.heldAllocs(e, func(a allocation) { used = append(used, a.requests) })
	for _, a := range e.pending {
		used = append(used, a.requests)
	}
	return Subtract(e.r.Spec.Template.Requests, used...)
}

func (s *store) index(e *entry) {
	e.node = e.r.Status.NodeName
	n := s.byNode[e.node]
	if n == nil {
		n = map[*entry]bool{}
		s.byNode[e.node] = n
	}
	n[e] = true
	s.owners.add(e)
	e.indexed = true
}

func (s *store) unindex(e *entry) {
	// e.node, not the status's node: the status may have changed since.
	if n := s.byNode[e.node]; n != nil {
		delete(n, e)
		if len(n) == 0 {
			delete(s.byNode, e.node)
		}
	}
	e.node = ""
	e.adjusted.Store(nil) // owners no longer use it: keep no copy of its node
	s.owners.remove(e)
	e.indexed = false
}

// get returns the latest reservation with this UID, if known.
func (s *store) get(uid types.UID) *schedv1alpha1.Reservation {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.entries[uid]; e != nil {
		return e.r
	}
	return nil
}

// failed records why a pending reservation could not be scheduled and hands
// it back to the queue. It reports false if the reservation is gone or no
// longer pending; the caller then only tells the queue it is done with it.
func (s *store) failed(uid types.UID, msg string) (*v1.Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[uid]
	if e == nil || e.phase() != schedv1alpha1.ReservationPending {
		return nil, false
	}
	if e.unschedulable != msg {
		e.unschedulable = msg
		s.notify(e.r.Name)
	}
	return e.pod, true
}

// unschedulableMessage is the last scheduling failure of a reservation.
func (s *store) unschedulableMessage(uid types.UID) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.entries[uid]; e != nil {
		return e.unschedulable
	}
	return ""
}

// boundOwners returns the bound owner pods of a reservation on node that
// the reservation holds (entry.holds), sorted.
func (s *store) boundOwners(uid types.UID, node string) []allocation {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.entries[uid]
	if e == nil || e.r.Status.NodeName != node {
		return nil
	}
	var out []allocation
	s.heldAllocs(e, func(a allocation) { out = append(out, a) })
	if a, ok := s.spent[uid]; ok && len(out) == 0 && e.allocateOnce() && e.holds(a) {
		out = append(out, a) // it consumed the reservation before its status said so
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pod.String() < out[j].pod.String() })
	return out
}
