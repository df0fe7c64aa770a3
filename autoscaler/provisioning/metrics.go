package provisioning

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

const (
	resultProvisioned = "provisioned"
	resultFailed      = "failed"
)

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_provisioning_requests_total",
		Help: "ProvisioningRequests that reached a result, by class and result (provisioned, failed).",
	}, []string{"class", "result"})
	bookingsActive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gantry_provisioning_bookings_active",
		Help: "Pods whose room ProvisioningRequests' bookings still hold (Reservations Pending or Available, less the pods that came).",
	})
	nodesCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_provisioning_nodes_created_total",
		Help: "Nodes added by atomic scale-up attempts, by node group.",
	}, []string{"node_group"})
	nodesRolledBack = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_provisioning_nodes_rolled_back_total",
		Help: "Nodes deleted because their scale-up attempt failed or its request was cancelled, by node group.",
	}, []string{"node_group"})
	nodeGroupBackoffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_provisioning_node_group_backoffs_total",
		Help: "Times a node group was backed off (left out of scale-up plans for a while) after a scale-up of it failed, by node group.",
	}, []string{"node_group"})
	bookedPodsNotPlaced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_provisioning_booked_pods_not_placed_total",
		Help: "Booked pods the scheduler did not place within the placement timeout although the simulation had found room for them, by class: each such attempt is released and retried; the request's condition names a node and the scheduler's reason.",
	}, []string{"class"})
	simulationEvaluations = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gantry_provisioning_simulation_evaluations",
		Help:    "Filter evaluations of one simulation of a request (scale-up planning included), as counted against --simulation-budget.",
		Buckets: prometheus.ExponentialBuckets(100, 4, 9),
	})
	simulationDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "gantry_provisioning_simulation_duration_seconds",
		Help:    "Time one simulation of a request took, once its namespace's turn came (scale-up planning included).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
	})
	simulationsRepeated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gantry_provisioning_simulations_repeated_total",
		Help: "Simulations done again because bookings committed while they ran may have taken the room they found.",
	})
	timeToProvisioned = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gantry_provisioning_time_to_provisioned_seconds",
		Help:    "Time from a ProvisioningRequest's creation to Provisioned=True, by class.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 12),
	}, []string{"class"})
)

func init() {
	metrics.Registry.MustRegister(requestsTotal, timeToProvisioned, bookingsActive, nodesCreated, nodesRolledBack, bookedPodsNotPlaced, nodeGroupBackoffs,
		simulationEvaluations, simulationDuration, simulationsRepeated)
}

func observeResult(c Class, result string) { requestsTotal.WithLabelValues(c.Name, result).Inc() }

// trackBookings records for how many pods a request's booking still holds
// room and sets the gauge to the sum over requests.
func (r *Reconciler) trackBookings(uid types.UID, active int) {
	r.activeMu.Lock()
	defer r.activeMu.Unlock()
	if r.active == nil {
		r.active = map[types.UID]int{}
	}
	if active == 0 {
		delete(r.active, uid)
	} else {
		r.active[uid] = active
	}
	sum := 0
	for _, n := range r.active {
		sum += n
	}
	bookingsActive.Set(float64(sum))
}
