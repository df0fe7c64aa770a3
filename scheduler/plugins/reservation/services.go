package reservation

import (
	"net/http"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// RegisterEndpoints serves /gantry/v1/plugins/Reservation/nodeReservations/{node}:
// the reservations on a node with what they hold, what is left, and the
// owner pods placed in them (pending ones only exist on the leader).
func (pl *Plugin) RegisterEndpoints(r frameworkext.Router) {
	r.GetLeaderOnly("/nodeReservations/{node}", func(w http.ResponseWriter, req *http.Request) {
		frameworkext.WriteJSON(w, http.StatusOK, pl.store.onNode(req.PathValue("node")))
	})
}

// NodeReservation is a reservation on a node, as the REST service shows it.
type NodeReservation struct {
	Name         string                           `json:"name"`
	UID          types.UID                        `json:"uid"`
	Phase        schedv1alpha1.ReservationPhase   `json:"phase"`
	AllocateOnce bool                             `json:"allocateOnce"`
	Allocatable  v1.ResourceList                  `json:"allocatable"`
	Remaining    v1.ResourceList                  `json:"remaining"`
	Owners       []schedv1alpha1.ReservationOwner `json:"owners"`
	Allocated    []string                         `json:"allocatedPods,omitempty"`
	Pending      []string                         `json:"pendingPods,omitempty"`
}

func (s *store) onNode(node string) []NodeReservation {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []NodeReservation{}
	for _, e := range s.entries {
		if e.r.Status.NodeName != node {
			continue
		}
		nr := NodeReservation{
			Name: e.r.Name, UID: e.r.UID, Phase: e.phase(), AllocateOnce: e.allocateOnce(),
			Allocatable: e.r.Spec.Template.Requests, Owners: e.r.Spec.Owners,
			Remaining: v1.ResourceList{},
		}
		if e.indexed {
			nr.Remaining = s.remaining(e)
		}
		s.heldAllocs(e, func(a allocation) { nr.Allocated = append(nr.Allocated, a.pod.String()) })
		for _, a := range e.pending {
			nr.Pending = append(nr.Pending, a.pod.String())
		}
		sort.Strings(nr.Allocated)
		sort.Strings(nr.Pending)
		out = append(out, nr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
