package benchutil

// ProvisionerThroughput is one run of autoscaler/provisioning/integration's
// BenchmarkCheckCapacityThroughput, a line of the file it records (and
// e2e/kueue/bench renders docs/performance-kueue.md from).
type ProvisionerThroughput struct {
	Limits   string  `json:"limits"`
	QPS      float32 `json:"qps"`
	Burst    int     `json:"burst"`
	Nodes    int     `json:"nodes"`
	Requests int     `json:"requests"`
	Pods     int     `json:"podsPerRequest"`
	// Decided counts the requests that ended Provisioned=True or
	// Failed=True; Failed those of them that failed.
	Decided int `json:"decided"`
	Failed  int `json:"failed"`
	// PerSecond is Decided over the window from the first request first
	// seen by the provisioner to the last decision.
	PerSecond float64 `json:"decisionsPerSecond"`
	WindowS   float64 `json:"windowSeconds"`
	// Decide is first seen → decision; Created is the request's Added
	// event → decision (queueing in the provisioner's work queue
	// included); Queued is Added → first seen. Milliseconds, keyed
	// p50/p90/p99/max (benchutil.LatencyPercentiles).
	Decide  map[string]float64 `json:"decideMs"`
	Created map[string]float64 `json:"createdToDecidedMs"`
	Queued  map[string]float64 `json:"queuedMs"`
	// ReconcilesPerRequest is the provisioner's reconciles while measured
	// (controller-runtime's controller_runtime_reconcile_total, every
	// result), per request.
	ReconcilesPerRequest float64 `json:"reconcilesPerRequest"`
	// Workers is the provisioner's --concurrent-provisioning-request-syncs.
	Workers int `json:"workers,omitempty"`
	// NotPlaced is how many booked pods the scheduler did not place
	// although the simulation had found room for them
	// (gantry_provisioning_booked_pods_not_placed_total while measured);
	// nil when the run did not record it.
	NotPlaced *float64 `json:"bookedPodsNotPlaced,omitempty"`
	// WritesPerRequest is kube-apiserver's writes while measured (every
	// client's: the requests' creation, the provisioner, the scheduler,
	// events), per request.
	WritesPerRequest float64 `json:"apiWritesPerRequest,omitempty"`
	// Writes are those writes by verb and resource[/subresource] ("POST
	// reservations"), in all.
	Writes map[string]float64 `json:"apiWrites,omitempty"`
}
