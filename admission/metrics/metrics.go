// Package metrics holds the metrics of Gantry's admission plugins, for both
// deployments (in-process in kube-apiserver, and gantry-webhook), registered
// in one place.
package metrics

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Deployments of the plugins, the "deployment" label.
const (
	InProcess = "in-process"
	Webhook   = "webhook"
)

// Decision results, the "result" label.
const (
	ResultAdmitted = "admitted" // no rule matched, or matches changed nothing
	ResultMutated  = "mutated"
	ResultRejected = "rejected"
	ResultAudited  = "audited"  // an Audit policy matched
	ResultConflict = "conflict" // two matching rules wrote one key differently
	ResultError    = "error"
)

var (
	// Duration is the admission latency of each plugin.
	Duration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "gantry",
		Subsystem:      "admission",
		Name:           "duration_seconds",
		Help:           "Time a Gantry admission plugin took for one request, by plugin and deployment.",
		Buckets:        []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05},
		StabilityLevel: metrics.ALPHA,
	}, []string{"plugin", "deployment"})

	// Decisions counts MetadataPolicy outcomes. A request may count under
	// several results (e.g. mutated and conflict).
	Decisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "gantry",
		Subsystem:      "metadatapolicy",
		Name:           "decisions_total",
		Help:           "MetadataPolicy admission decisions by result and deployment.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result", "deployment"})
)

var once sync.Once

// Register registers the metrics with the component's legacy registry.
func Register() {
	once.Do(func() {
		legacyregistry.MustRegister(Duration, Decisions)
	})
}

// Observe records a request's duration since start.
func Observe(plugin, deployment string, start time.Time) {
	Duration.WithLabelValues(plugin, deployment).Observe(time.Since(start).Seconds())
}
