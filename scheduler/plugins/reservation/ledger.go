package reservation

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	apiresource "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation/reservepod"
)

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

// store is the Reservation plugin's state, shared by the plugin's instances
// in every profile of the process. It is rebuilt from informers alone: the
// reservations, and the bound pods that carry AnnotationAllocated. The store
// puts pending reservations into the scheduling queue and Available ones,
// less what their owners took, into the scheduler's cache, so that every
// plugin, in-tree or not, counts reserved capacity as used.
//
// The ledger (this file) is what the store knows: entries, claims,
// allocations, candidates and nominations. The mirror (mirror.go) drives the
// scheduler's cache and queue from it; services.go is its REST view.
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
		s.queue.Delete(e.pod)
		e.queued = false
	}
	s.uncache(e.pod)
	delete(s.allocs, r.UID)
	delete(s.nominated, r.UID)
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
	return held
}

// remaining is what the reservation still holds for its owners.
func (s *store) remaining(e *entry) v1.ResourceList {
	var used []v1.ResourceList
	s.heldAllocs(e, func(a allocation) { used = append(used, a.requests) })
	for _, a := range e.pending {
		used = append(used, a.requests)
	}
	return subtract(e.r.Spec.Template.Requests, used...)
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

// candidate is a reservation an owner pod may use, as seen at PreFilter.
type candidate struct {
	uid       types.UID
	name      string
	node      string
	remaining v1.ResourceList
	// cached is the reserve pod as the scheduler's cache holds it, which the
	// filter hook takes off a copy of the node.
	cached *v1.Pod
	// memo is the entry's last node without it (adjustedFor).
	memo *atomic.Pointer[adjustedNode]
}

// adjustedNode is a node as the filter hook hands it to an owner: without
// the reservation's reserve pod. It stays valid while the scheduler's view
// of the node has the same generation (every change to a NodeInfo, in the
// cache or on a copy, takes a new one) and the reservation holds the same
// live pod.
type adjustedNode struct {
	generation int64
	live       *v1.Pod
	info       fwk.NodeInfo
}

// adjustedFor returns ni without the candidate's reserve pod. Owners of
// many reservations are filtered over the same unchanged nodes cycle after
// cycle; the copy is made once per node state, not once per owner.
// Filter plugins only read the NodeInfo they are given (whoever adds to one
// copies it first), so owners may share it.
func (c *candidate) adjustedFor(ni fwk.NodeInfo) fwk.NodeInfo {
	gen := ni.GetGeneration()
	if a := c.memo.Load(); a != nil && a.generation == gen && a.live == c.cached {
		return a.info
	}
	adjusted := ni.Snapshot()
	if err := adjusted.RemovePod(klog.Background(), c.cached); err != nil {
		// The snapshot predates the reservation's arrival in the cache:
		// the node already shows the capacity as free.
		adjusted = ni
	}
	c.memo.Store(&adjustedNode{generation: gen, live: c.cached, info: adjusted})
	return adjusted
}

// maxHintLookups bounds how many usable reservations of one pod ownedHint
// looks at for one that holds the whole pod: a pod may own thousands.
const maxHintLookups = 64

// ownedHint reports whether pod owns a reservation that owners can use now
// and, when one of the first maxHintLookups such reservations holds the
// whole pod, the node it is on: the scheduler tries that node before its
// sample of the cluster (Plugin.HintNode). It stops at the first that holds
// the pod. req is pod's requests, computed once the pod is known to own one.
func (s *store) ownedHint(pod *v1.Pod) (owns bool, req v1.ResourceList, node string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	looked := 0
	s.owners.lookup(pod, func(e *entry) bool {
		if !e.indexed || e.live == nil {
			return true
		}
		if !owns {
			owns, req = true, podRequests(pod)
		}
		if fits(req, e.live.Spec.Containers[0].Resources.Requests) {
			node = e.node
			return false
		}
		looked++
		return looked < maxHintLookups
	})
	return owns, req, node
}

// candidatesOn returns the reservations on node that pod owns and owners
// can use, ordered by name. The filter hook asks node by node, so an owner
// pod costs what the nodes it is filtered on hold, not what every
// reservation it owns would. Nothing is copied: a candidate shares the
// entry's read-only live pod.
func (s *store) candidatesOn(node string, pod *v1.Pod) []candidate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []candidate
	for e := range s.byNode[node] {
		if e.live == nil || !e.ownedBy(pod) {
			continue
		}
		out = append(out, candidate{
			uid: e.r.UID, name: e.r.Name, node: node,
			remaining: e.live.Spec.Containers[0].Resources.Requests, cached: e.live, memo: &e.adjusted,
		})
	}
	if len(out) > 1 {
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	}
	return out
}

// ownerSignature names the set of reservations pod may use now, for
// scheduling signatures; "" if it owns none.
func (s *store) ownerSignature(pod *v1.Pod) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return strings.Join(s.owners.ownerKeys(pod, func(e *entry) bool { return e.indexed && e.live != nil }), ";")
}

// claim records, in a scheduling cycle, that pod takes reservation uid on
// node. It fails if the reservation can no longer be used there.
func (s *store) claim(uid types.UID, pod *v1.Pod, node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[uid]
	if e == nil || !e.indexed || e.r.Status.NodeName != node {
		return false
	}
	e.pending[pod.UID] = allocation{
		pod:      types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name},
		uid:      pod.UID,
		node:     node,
		requests: apiresource.PodRequests(pod, apiresource.PodResourcesOptions{}),
	}
	s.reconcile(e)
	return true
}

// release undoes claim.
func (s *store) release(uid types.UID, pod *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[uid]; e != nil {
		if _, ok := e.pending[pod.UID]; ok {
			delete(e.pending, pod.UID)
			s.reconcile(e)
		}
	}
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

// nominate records that the pending reservation uid preempted on node, or,
// with node "", that it no longer waits there.
func (s *store) nominate(uid types.UID, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[uid]
	if node == "" || e == nil || e.phase() != schedv1alpha1.ReservationPending {
		delete(s.nominated, uid)
		return
	}
	s.nominated[uid] = node
}

// nominatedFor returns, by node, the reserve pods nominated there that pod
// must leave room for: those of at least its priority, as upstream adds
// nominated pods to a node for the filters. Nil when there are none.
func (s *store) nominatedFor(pod *v1.Pod) map[string][]*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.nominated) == 0 {
		return nil
	}
	var out map[string][]*v1.Pod
	prio := corev1helpers.PodPriority(pod)
	for uid, node := range s.nominated {
		e := s.entries[uid]
		if e == nil || uid == pod.UID || corev1helpers.PodPriority(e.pod) < prio {
			continue
		}
		if out == nil {
			out = map[string][]*v1.Pod{}
		}
		p := e.pod.DeepCopy()
		p.Spec.NodeName = node
		out[node] = append(out[node], p)
	}
	return out
}

// A pending reservation that preempts is nominated to the node its victims
// leave, as a pod is. The scheduler's nominator cannot hold it (it looks
// every nominee up among the Pods), so the plugin's store does, and
// Gantry's AsyncPreemption reads and clears those nominations through
// frameworkext.ReservationNominator, which the store implements.
var _ frameworkext.ReservationNominator = &store{}

// NominatedOn returns the pods of the pending reservations nominated to node.
func (s *store) NominatedOn(node string) []*v1.Pod {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*v1.Pod
	for uid, n := range s.nominated {
		if e := s.entries[uid]; e != nil && n == node {
			out = append(out, e.pod)
		}
	}
	return out
}

// ClearNomination forgets the nomination of the pending reservation uid.
func (s *store) ClearNomination(uid types.UID) { s.nominate(uid, "") }

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
	sort.Slice(out, func(i, j int) bool { return out[i].pod.String() < out[j].pod.String() })
	return out
}

// The store checks allocation annotations for Gantry's AsyncPreemption.
var _ reservepod.Allocations = &store{}

// AllocatedPriority returns the priority of the live reservation p is
// placed in: its annotation names a reservation this store knows, p is one
// of that reservation's owners and is bound to its node. The priority is
// the reservation's own (its template's), never the annotation's.
func (s *store) AllocatedPriority(p *v1.Pod) (int32, bool) {
	v, ok := p.Annotations[schedv1alpha1.AnnotationAllocated]
	if !ok || p.Spec.NodeName == "" {
		return 0, false
	}
	var a schedv1alpha1.ReservationAllocation
	if json.Unmarshal([]byte(v), &a) != nil || a.UID == "" {
		return 0, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.entries[a.UID]
	if e == nil || !e.holds(allocation{node: p.Spec.NodeName, obj: p}) {
		return 0, false
	}
	return corev1helpers.PodPriority(e.pod), true
}
