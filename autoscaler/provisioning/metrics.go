package provisioning

import (
	"github.com/prometheus/client_golang/prometheus"
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
	timeToProvisioned = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gantry_provisioning_time_to_provisioned_seconds",
		Help:    "Time from a ProvisioningRequest's creation to Provisioned=True, by class.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 12),
	}, []string{"class"})
)

func init() {
	metrics.Registry.MustRegister(requestsTotal, timeToProvisioned)
}

func observeResult(c Class, result string) { requestsTotal.WithLabelValues(c.Name, result).Inc() }
