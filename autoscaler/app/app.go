// Package app builds and runs gantry-provisioner: a controller-runtime
// manager (leader election, metrics, health) with the ProvisioningRequest
// controller, the scheduling simulator it decides with, the node-group
// provider atomic scale-ups use, and scale-down.
package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups/clusterapi"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups/kwok"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/gangs"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/scaledown"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// Scheme holds every type the provisioner reads or writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(provv1.AddToScheme(s))
	utilruntime.Must(autoscalingv1alpha1.AddToScheme(s))
	utilruntime.Must(schedv1alpha1.AddToScheme(s))
	return s
}

// Profile loads the named profile of a KubeSchedulerConfiguration file,
// defaulted as kube-scheduler defaults it.
func Profile(file, name string) (*schedconfig.KubeSchedulerProfile, error) {
	var cfg *schedconfig.KubeSchedulerConfiguration
	if file == "" {
		var err error
		if cfg, err = latest.Default(); err != nil {
			return nil, err
		}
	} else {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", file, err)
		}
		var ok bool
		if cfg, ok = obj.(*schedconfig.KubeSchedulerConfiguration); !ok {
			return nil, fmt.Errorf("%s holds a %T, not a KubeSchedulerConfiguration", file, obj)
		}
	}
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == name {
			return &cfg.Profiles[i], nil
		}
	}
	return nil, fmt.Errorf("the scheduler configuration has no profile %q", name)
}

// maxSimulationInstances bounds --simulation-instances: each instance is a
// framework with its plugins' state.
const maxSimulationInstances = 64

// maxWorkers bounds --concurrent-provisioning-request-syncs.
const maxWorkers = 256

// New builds the manager with the controller; Start runs it.
func New(ctx context.Context, cfg *rest.Config, o Options) (ctrl.Manager, error) {
	logger := klog.FromContext(ctx)
	ctrl.SetLogger(logger)
	profile, err := Profile(o.SchedulerConfig, o.SchedulerName)
	if err != nil {
		return nil, err
	}
	if o.Workers < 1 || o.Workers > maxWorkers {
		return nil, fmt.Errorf("--concurrent-provisioning-request-syncs must be from 1 to %d, not %d", maxWorkers, o.Workers)
	}
	if o.SimulationBudget < 0 || o.SimulationTimeout < 0 {
		return nil, fmt.Errorf("--simulation-budget and --simulation-timeout may not be negative (0: their defaults)")
	}
	if o.SimulationInstances < 0 || o.SimulationInstances > maxSimulationInstances {
		return nil, fmt.Errorf("--simulation-instances must be from 1 to %d (0: %d), not %d", maxSimulationInstances, provisioning.DefaultSimulationInstances, o.SimulationInstances)
	}
	if cfg.QPS == 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = o.QPS, o.Burst
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "gantry-provisioner",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A provisioner that stops gracefully hands over at once.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.HealthAddress,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: &o.SkipNameValidation},
	})
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The simulation's plugins and its snapshot read client-go informers.
	// Without managed fields, which nothing reads: the cluster's objects,
	// the tenants' resource claims among them, cost less to keep.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripManagedFields))
	sim, err := simulator.New(ctx, profile, client, factory, simulator.WithInstances(cmp.Or(o.SimulationInstances, provisioning.DefaultSimulationInstances)))
	if err != nil {
		return nil, err
	}
	if skipped := sim.Skipped(); len(skipped) > 0 {
		logger.Info("Simulating without plugins of the profile", "profile", o.SchedulerName, "skipped", skipped)
	}
	provider, err := newProvider(ctx, o, cfg, client)
	if err != nil {
		return nil, err
	}
	if provider != nil && o.ScaleDownUnneededTime > 0 && o.ScaleDownInterval <= 0 {
		return nil, fmt.Errorf("scale-down interval must be positive, got %s", o.ScaleDownInterval)
	}
	pods := factory.Core().V1().Pods()
	if err := pods.Informer().AddIndexers(provisioning.PodIndexers()); err != nil {
		return nil, err
	}
	if o.PodGroupRequestsClass != "" {
		if err := pods.Informer().AddIndexers(gangs.PodIndexers()); err != nil {
			return nil, err
		}
	}
	r := &provisioning.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Simulator: sim, Provider: provider,
		Nodes: factory.Core().V1().Nodes().Lister(), Pods: pods.Lister(), PodInformer: pods.Informer(),
		Recorder: mgr.GetEventRecorderFor("gantry-provisioner"), Clock: clock.RealClock{},
		PlacementTimeout: o.PlacementTimeout, PriorityClasses: factory.Scheduling().V1().PriorityClasses().Lister(),
		MaxPodsPerRequest: o.MaxPodsPerRequest, MaxBookingsPerNamespace: o.MaxBookingsPerNamespace, ProcessorInstance: o.ProcessorInstance, Workers: o.Workers,
		NodeGroupBackoff: o.NodeGroupBackoff, MaxNodeGroupBackoff: o.MaxNodeGroupBackoff,
		NoUpstreamClasses: !o.UpstreamClasses, FinishedRequestTTL: o.FinishedRequestTTL,
		SimulationBudget: o.SimulationBudget, SimulationTimeout: o.SimulationTimeout,
	}
	synced := &atomic.Bool{}
	r.Synced = synced.Load
	if err := mgr.Add(informersRunnable{factory, synced}); err != nil {
		return nil, err
	}
	crds := crdWaiter{discovery: client.Discovery(), setup: func() error { return r.SetupWithManager(mgr) }}
	if missing, err := crds.missing(); err == nil && len(missing) == 0 {
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, err
		}
	} else if err := mgr.Add(&crds); err != nil {
		// Scale-down and the rest go on; ProvisioningRequests are served
		// once the CRDs are there (or the API server answers: it may
		// start with the provisioner).
		return nil, err
	}
	// Kueue's Workloads, whose evictions end their requests' bookings:
	// watched once Kueue's API is served, whenever it is installed.
	workloads := &crdWaiter{discovery: client.Discovery(), setup: func() error { return r.SetupWorkloadsWithManager(mgr) },
		required: []schema.GroupVersionResource{provisioning.WorkloadGVK.GroupVersion().WithResource("workloads")}, optional: true}
	if err := mgr.Add(workloads); err != nil {
		return nil, err
	}
	// PodGroups' requests, once the PodGroup API is served (GenericWorkload).
	if o.PodGroupRequestsClass != "" {
		g := &gangs.Gangs{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), PodInformer: pods.Informer(), Recorder: mgr.GetEventRecorderFor("gantry-provisioner"),
			Class: o.PodGroupRequestsClass, MaxPods: o.MaxPodsPerRequest, MaxRequestsPerNamespace: o.MaxPodGroupRequestsPerNamespace}
		podGroups := &crdWaiter{discovery: client.Discovery(), setup: func() error { return g.SetupWithManager(mgr) },
			required: []schema.GroupVersionResource{schedulingv1beta1.SchemeGroupVersion.WithResource("podgroups")}, optional: true}
		if err := mgr.Add(podGroups); err != nil {
			return nil, err
		}
	}
	if provider != nil && o.ScaleDownUnneededTime > 0 {
		if err := mgr.Add(&scaledown.ScaleDown{Reconciler: r, UnneededTime: o.ScaleDownUnneededTime, Interval: o.ScaleDownInterval, TaintGrace: o.ScaleDownTaintGrace}); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("informers", func(*http.Request) error {
		if !synced.Load() {
			return errors.New("informers not synced yet")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// requiredCRDs are the resources the ProvisioningRequest controller reads
// and writes, by group version.
var requiredCRDs = []schema.GroupVersionResource{
	provv1.SchemeGroupVersion.WithResource("provisioningrequests"),
	schedv1alpha1.SchemeGroupVersion.WithResource("reservations"),
	autoscalingv1alpha1.SchemeGroupVersion.WithResource("provisioningclasses"),
}

// crdInterval is how often a provisioner missing CRDs looks for them;
// discoveryRetry, how soon it asks again when discovery failed.
var crdInterval, discoveryRetry = 10 * time.Second, time.Second

// crdWaiter sets the ProvisioningRequest controller up once the CRDs it
// needs are served. Without them its cache would never sync, and the
// manager would stop, taking scale-down with it, in a crash loop.
type crdWaiter struct {
	discovery discovery.DiscoveryInterface
	setup     func() error
	// required are the resources it waits for (nil: requiredCRDs).
	required []schema.GroupVersionResource
	// optional: another project's API (Kueue's), whose absence is no
	// error; it is waited for all the same, as it may be installed later.
	optional bool
	// waiting are the CRDs last found missing.
	waiting []string
}

// missing names the required resources the API server does not serve.
func (c *crdWaiter) missing() ([]string, error) {
	required := c.required
	if required == nil {
		required = requiredCRDs
	}
	var out []string
	for _, gvr := range required {
		list, err := c.discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if apierrors.IsNotFound(err) {
			out = append(out, gvr.GroupResource().String())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("discovering %s: %w", gvr.GroupVersion(), err)
		}
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gvr.Resource }) {
			out = append(out, gvr.GroupResource().String())
		}
	}
	return out, nil
}

// Start looks for the CRDs, at once and then every crdInterval, and sets
// the controller up once they are all there; it says which are missing
// whenever that changes.
func (c *crdWaiter) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for {
		missing, err := c.missing()
		wait := crdInterval
		switch {
		case err != nil:
			logger.V(1).Info("Looking for the CRDs of ProvisioningRequests", "err", err)
			wait = discoveryRetry
		case len(missing) == 0:
			if c.waiting != nil {
				logger.Info("CRDs installed", "resources", c.waiting)
			}
			return c.setup()
		case c.optional:
			if c.waiting == nil {
				logger.V(1).Info("Not watching an optional API until it is served", "missing", missing)
				c.waiting = missing
			}
		case !slices.Equal(missing, c.waiting):
			logger.Error(nil, "Not serving ProvisioningRequests: CRDs not installed (kubectl apply --server-side -k crds/manifests, or an overlay of config/); waiting for them", "missing", missing)
			c.waiting = missing
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// NeedLeaderElection is false: the controller it sets up is leader elected
// itself.
func (*crdWaiter) NeedLeaderElection() bool { return false }

// metricsOptions serve /metrics over HTTPS (a self-signed certificate
// unless o.MetricsCertDir holds tls.crt and tls.key) to callers whose token
// the API server authenticates and who may get the non-resource URL
// /metrics (the ClusterRole gantry-provisioner-metrics-reader), over HTTP/1.1
// only (HTTP/2's rapid-reset attacks need no authentication).
func metricsOptions(o Options) metricsserver.Options {
	return metricsserver.Options{
		BindAddress:    o.MetricsAddress,
		SecureServing:  true,
		CertDir:        o.MetricsCertDir,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts:        []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
}

// newProvider builds the configured node-group provider (nil for none).
func newProvider(ctx context.Context, o Options, cfg *rest.Config, client kubernetes.Interface) (nodegroups.Provider, error) {
	switch o.NodeGroupProvider {
	case "":
		if o.NodeGroupConfig != "" {
			return nil, errors.New("a node-group configuration needs a node-group provider")
		}
		return nil, nil
	case "kwok":
		c, err := kwok.LoadConfig(o.NodeGroupConfig)
		if err != nil {
			return nil, err
		}
		return kwok.New(c, client), nil
	case "clusterapi":
		c, err := clusterapi.LoadConfig(o.NodeGroupConfig)
		if err != nil {
			return nil, err
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		p, err := clusterapi.New(ctx, c, dyn, client)
		if err != nil {
			return nil, err
		}
		return p, nil
	default:
		return nil, fmt.Errorf("unknown node-group provider %q (known: kwok, clusterapi)", o.NodeGroupProvider)
	}
}

// informersRunnable starts the client-go informers with the manager and
// waits for them to sync before the controller runs (it is not leader
// elected: a standby keeps warm caches).
type informersRunnable struct {
	f      informers.SharedInformerFactory
	synced *atomic.Bool
}

func (i informersRunnable) Start(ctx context.Context) error {
	i.f.Start(ctx.Done())
	for typ, ok := range i.f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer of %v did not sync", typ)
		}
	}
	i.synced.Store(true)
	<-ctx.Done()
	i.f.Shutdown()
	return nil
}

func (informersRunnable) NeedLeaderElection() bool { return false }

// stripManagedFields drops an object's managed fields as its informer
// stores it (kube-scheduler does the same for pods).
func stripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
