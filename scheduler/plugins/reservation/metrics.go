package reservation

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const metricsSubsystem = "gantry_reservation"

var (
	reservationsByPhase = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      metricsSubsystem,
		Name:           "reservations",
		Help:           "Reservations known to the scheduler, by phase.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"phase"})
	transitions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "transitions_total",
		Help:           "Reservation phase changes written by the scheduler, by new phase and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"phase", "reason"})
	allocations = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "allocations_total",
		Help:           "Owner pods bound into a reservation.",
		StabilityLevel: metrics.ALPHA,
	})
	ownerHints = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "owner_hints_total",
		Help:           "Owner pods reserved on a node after the plugin hinted one of their reservations' nodes, by whether that node was the one (used) or failed the filters (elsewhere).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(reservationsByPhase, transitions, allocations, ownerHints)
	})
}
