package app

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/gangs"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/scaledown"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
)

// Options configure the provisioner.
type Options struct {
	// SchedulerConfig is the KubeSchedulerConfiguration file of the
	// cluster's scheduler; "" uses kube-scheduler's defaults.
	SchedulerConfig string
	// SchedulerName is the profile whose filters the simulation runs.
	SchedulerName string
	// LeaderElect, in LeaderElectionNamespace, with this identity prefix.
	LeaderElect             bool
	LeaderElectionNamespace string
	// MetricsAddress serves /metrics over HTTPS, with authentication and
	// authorization; MetricsCertDir holds its certificate (tls.crt,
	// tls.key; "": self-signed). HealthAddress serves /healthz and /readyz
	// over HTTP, for the kubelet.
	MetricsAddress string
	MetricsCertDir string
	HealthAddress  string
	// PlacementTimeout: see provisioning.Reconciler.
	PlacementTimeout time.Duration
	// QPS and Burst of the client, when the rest config sets none.
	QPS   float32
	Burst int
	// NodeGroupProvider names the provider atomic scale-ups add nodes
	// through ("" none, "kwok", "clusterapi"), configured by
	// NodeGroupConfig.
	NodeGroupProvider string
	NodeGroupConfig   string
	// ScaleDownUnneededTime is how long a node the provisioner created
	// must be empty and unbooked before it is removed (0: never);
	// ScaleDownInterval is how often nodes are looked at.
	ScaleDownUnneededTime time.Duration
	ScaleDownInterval     time.Duration
	// ScaleDownTaintGrace: see scaledown.ScaleDown.TaintGrace.
	ScaleDownTaintGrace time.Duration
	// MaxPodsPerRequest and Workers: see provisioning.Reconciler.
	MaxPodsPerRequest int
	// MaxBookingsPerNamespace: see provisioning.Reconciler.
	MaxBookingsPerNamespace int
	Workers                 int
	// ProcessorInstance, UpstreamClasses (the opposite of
	// provisioning.Reconciler.NoUpstreamClasses) and FinishedRequestTTL:
	// see provisioning.Reconciler.
	ProcessorInstance  string
	UpstreamClasses    bool
	FinishedRequestTTL time.Duration
	// NodeGroupBackoff and MaxNodeGroupBackoff: see provisioning.Reconciler.
	NodeGroupBackoff, MaxNodeGroupBackoff time.Duration
	// SimulationBudget and SimulationTimeout: see provisioning.Reconciler.
	SimulationBudget  int64
	SimulationTimeout time.Duration
	// SimulationInstances is how many simulations run at once.
	SimulationInstances int
	// PodGroupRequestsClass, if set, turns package gangs on: unschedulable
	// PodGroups get a ProvisioningRequest of this class.
	// MaxPodGroupRequestsPerNamespace: see gangs.Gangs.
	PodGroupRequestsClass           string
	MaxPodGroupRequestsPerNamespace int
	// SkipNameValidation lets one process build the manager more than once
	// (tests that restart the provisioner in-process).
	SkipNameValidation bool
}

// NewOptions are the provisioner's options with the defaults of its flags.
func NewOptions() *Options {
	return &Options{
		SchedulerName:           "default-scheduler",
		LeaderElect:             true,
		LeaderElectionNamespace: "kube-system",
		MetricsAddress:          ":8443",
		HealthAddress:           ":8083",
		QPS:                     100,
		Burst:                   200,
		PlacementTimeout:        30 * time.Second,
		ScaleDownUnneededTime:   10 * time.Minute,
		ScaleDownInterval:       10 * time.Second,
		ScaleDownTaintGrace:     scaledown.DefaultTaintGrace,
		MaxPodsPerRequest:       provisioning.DefaultMaxPodsPerRequest,
		MaxBookingsPerNamespace: provisioning.DefaultMaxBookingsPerNamespace,
		Workers:                 provisioning.DefaultWorkers,
		UpstreamClasses:         true,
		FinishedRequestTTL:      provisioning.DefaultFinishedRequestTTL,
		NodeGroupBackoff:        provisioning.DefaultNodeGroupBackoff,
		MaxNodeGroupBackoff:     provisioning.DefaultMaxNodeGroupBackoff,
		SimulationBudget:        simulator.DefaultEvaluations,
		SimulationTimeout:       provisioning.DefaultSimulationTimeout,
		SimulationInstances:     provisioning.DefaultSimulationInstances,

		MaxPodGroupRequestsPerNamespace: gangs.DefaultMaxRequestsPerNamespace,
	}
}

// AddFlags registers the provisioner's flags in fs, with o's values as
// defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SchedulerConfig, "scheduler-config", o.SchedulerConfig, "the cluster scheduler's KubeSchedulerConfiguration file, whose profile's filters the simulation runs (default: kube-scheduler's defaults)")
	fs.StringVar(&o.SchedulerName, "scheduler-name", o.SchedulerName, "the profile of --scheduler-config to simulate")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "run as one of several replicas, one of them active")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "namespace of the leader election lease")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "address of /metrics, served over HTTPS to callers allowed to get the non-resource URL /metrics (the ClusterRole gantry-provisioner-metrics-reader) (\"0\" off)")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "directory of the metrics server's tls.crt and tls.key, reloaded when they change (default: a self-signed certificate)")
	fs.StringVar(&o.HealthAddress, "health-probe-bind-address", o.HealthAddress, "address of /healthz and /readyz (\"0\" off)")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "client QPS to kube-apiserver (bookings are one create per pod)")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "client burst to kube-apiserver")
	fs.DurationVar(&o.PlacementTimeout, "booking-placement-timeout", o.PlacementTimeout, "how long a booking's reservations may stay unplaced before the attempt is retried")
	fs.StringVar(&o.NodeGroupProvider, "node-group-provider", o.NodeGroupProvider, "where atomic scale-ups add nodes: kwok or clusterapi (empty: nowhere; atomic classes book existing capacity only)")
	fs.StringVar(&o.NodeGroupConfig, "node-group-config", o.NodeGroupConfig, "the node-group provider's configuration file")
	fs.DurationVar(&o.ScaleDownUnneededTime, "scale-down-unneeded-time", o.ScaleDownUnneededTime, "how long a node the provisioner created must be empty and unbooked before it is removed (0: never)")
	fs.DurationVar(&o.ScaleDownInterval, "scale-down-interval", o.ScaleDownInterval, "how often scale-down looks at the nodes")
	fs.DurationVar(&o.ScaleDownTaintGrace, "scale-down-taint-grace", o.ScaleDownTaintGrace, "how long scale-down waits between tainting nodes and looking at them again (pods, nominations, bookings) before deleting them: bindings the scheduler decided before it saw the taint commit meanwhile")
	fs.IntVar(&o.Workers, "concurrent-provisioning-request-syncs", o.Workers, "how many ProvisioningRequests are reconciled at once (simulations run --simulation-instances at a time); more gets more requests decided a second when --kube-api-qps allows it")
	fs.IntVar(&o.MaxPodsPerRequest, "max-pods-per-request", o.MaxPodsPerRequest, "the most pods (the sum of spec.podSets[*].count) one ProvisioningRequest may ask for; a request asking for more fails with reason TooManyPods before anything is simulated. Upstream has no limit; the default is the largest cluster of Kubernetes' scalability thresholds (5000 nodes), one pod per node")
	fs.IntVar(&o.MaxBookingsPerNamespace, "max-bookings-per-namespace", o.MaxBookingsPerNamespace, "the most Reservations the bookings of one namespace's requests may hold at once (each is placed by the scheduler and written by its status controller, whatever it holds). A booking that would pass it is not made: the request fails with reason TooManyBookings if its booking alone needs more, and is retried as capacity not found otherwise. The default is the most Reservations one request can need (--max-pods-per-request's default, one per pod)")
	fs.StringVar(&o.ProcessorInstance, "check-capacity-processor-instance", o.ProcessorInstance, "serve only the check-capacity requests whose processorInstance parameter is this, and no atomic scale-up request, as cluster-autoscaler's flag of the same name (empty: serve the requests that name no instance)")
	fs.BoolVar(&o.UpstreamClasses, "serve-upstream-classes", o.UpstreamClasses, "serve the upstream class names (check-capacity.autoscaling.x-k8s.io, best-effort-atomic-scale-up.autoscaling.x-k8s.io and their older names); false leaves them to a cluster-autoscaler running beside, and serves ProvisioningClasses only")
	fs.DurationVar(&o.NodeGroupBackoff, "initial-node-group-backoff-duration", o.NodeGroupBackoff, "how long a node group whose scale-up failed (nodes not Ready within the provisioning timeout, or refused by the provider) is left out of scale-up plans, as cluster-autoscaler's flag of the same name; doubled after each further failure in a row")
	fs.DurationVar(&o.MaxNodeGroupBackoff, "max-node-group-backoff-duration", o.MaxNodeGroupBackoff, "the longest a node group is backed off, as cluster-autoscaler's flag of the same name")
	fs.Int64Var(&o.SimulationBudget, "simulation-budget", o.SimulationBudget, "the most filter evaluations (one pod on one node; a pod with required inter-pod terms or spread constraints counts a node more for each node; a pod with resource claims, one more per 4 ResourceSlices) one simulation of a request may do; a request that needs more fails with reason SimulationBudgetExceeded. The default is about 2 s of one CPU")
	fs.DurationVar(&o.SimulationTimeout, "simulation-timeout", o.SimulationTimeout, "the longest one simulation of a request may take once its turn came; a request that needs longer fails with reason SimulationBudgetExceeded")
	fs.IntVar(&o.SimulationInstances, "simulation-instances", o.SimulationInstances, "how many simulations run at once, each for a different namespace; the namespaces waiting take turns, the one served longest ago first. Each holds a copy of the scheduling framework's state")
	fs.StringVar(&o.PodGroupRequestsClass, "pod-group-requests-class", o.PodGroupRequestsClass, "make a ProvisioningRequest of this class for every gang PodGroup (scheduling.k8s.io/v1beta1, gang scheduling) the scheduler marks unschedulable: its pending members, whose booking they use, deleted once the group is placed or gone (empty: none; needs the rights of autoscaler/config/components/pod-group-requests)")
	fs.IntVar(&o.MaxPodGroupRequestsPerNamespace, "max-pod-group-requests-per-namespace", o.MaxPodGroupRequestsPerNamespace, "the most ProvisioningRequests --pod-group-requests-class makes in one namespace at once; a PodGroup past it gets a warning event and no request")
	fs.DurationVar(&o.FinishedRequestTTL, "delete-finished-requests-after", o.FinishedRequestTTL, "delete a ProvisioningRequest this long after it ended (Failed, BookingExpired or CapacityRevoked), as cluster-autoscaler does after 7 days (0: never)")
}
