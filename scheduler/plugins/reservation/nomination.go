package reservation

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// A pending reservation that preempts is nominated to the node its victims
// leave, as a pod is. The scheduler's nominator cannot hold it (it looks
// every nominee up among the Pods), so the plugin's store does, and
// Gantry's AsyncPreemption reads and clears those nominations here.

// storeOf returns the Reservation plugin's store in h's scheduler, or nil
// when the plugin does not run there.
func storeOf(h fwk.Handle) *store {
	eh, ok := h.(frameworkext.ExtendedHandle)
	if !ok {
		return nil
	}
	return eh.Extender().Shared(Name, func() any { return &shared{} }).(*shared).store
}

// NominatedOn returns the pods of the pending reservations nominated to node.
func NominatedOn(h fwk.Handle, node string) []*v1.Pod {
	s := storeOf(h)
	if s == nil {
		return nil
	}
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
func ClearNomination(h fwk.Handle, uid types.UID) {
	if s := storeOf(h); s != nil {
		s.nominate(uid, "")
	}
}
