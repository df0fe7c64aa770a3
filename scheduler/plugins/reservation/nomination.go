package reservation

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

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
