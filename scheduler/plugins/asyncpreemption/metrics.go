package asyncpreemption

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Results of one preemption's API work.
const (
	resultSuccess   = "success"
	resultError     = "error"
	resultCancelled = "cancelled"
)

var (
	goroutineDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      "gantry_preemption",
		Name:           "goroutine_duration_seconds",
		Help:           "Duration of a preemption's asynchronous API work, by its result.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	goroutineTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "gantry_preemption",
		Name:           "goroutine_executions_total",
		Help:           "Preemptions whose asynchronous API work ended, by result.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	attempts = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "gantry_preemption",
		Name:           "attempts_total",
		Help:           "PostFilter calls of AsyncPreemption.",
		StabilityLevel: metrics.ALPHA,
	})
	gangAttempts = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "gantry_preemption",
		Name:           "pod_group_attempts_total",
		Help:           "PodGroupPostFilter calls of AsyncPreemption, by the status code they returned.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"code"})
	victims = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "gantry_preemption",
		Name:           "victims_total",
		Help:           "Victims preempted (deleted, or rejected while waiting on permit).",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(goroutineDuration, goroutineTotal, attempts, gangAttempts, victims)
	})
}
