package reservation

import (
	"net/http"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// RegisterEndpoints serves /apis/v1/plugins/Reservation/nodeReservations/{node}:
// the reservations on a node with what they hold, what is left, and the
// owner pods placed in them (pending ones only exist on the leader).
func (pl *Plugin) RegisterEndpoints(r frameworkext.Router) {
	r.GetLeaderOnly("/nodeReservations/{node}", func(w http.ResponseWriter, req *http.Request) {
		frameworkext.WriteJSON(w, http.StatusOK, pl.store.onNode(req.PathValue("node")))
	})
}
