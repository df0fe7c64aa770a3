package reservation

import (
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// The store's part in preemption. A pending reservation that preempts is
// nominated to the node its victims leave, as a pod is; the scheduler's
// nominator cannot hold it (it looks every nominee up among the Pods), so
// the store does: other pods' filters leave it room there (nominatedFor,
// through the filter hook). Gantry's AsyncPreemption reads and clears those
// nominations, and asks the store which owner pods a live reservation
// vouches for, through the contract it provides (reservepod.Provide in New).
var _ reservepod.Provider = &store{}

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
