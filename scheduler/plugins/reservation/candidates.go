package reservation

import (
	"sort"
	"strings"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	apiresource "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

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
