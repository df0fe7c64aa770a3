package frameworkext

import (
	"context"
	"net/http"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	gantryinformers "github.com/gantry-dev/gantry/crds/client/informers/externalversions"
)

// ExtendedHandle is what Gantry's plugins get instead of the bare framework handle.
type ExtendedHandle interface {
	fwk.Handle
	// GantryClientSet is a typed client for Gantry's API groups.
	GantryClientSet() gantryclient.Interface
	// GantryInformerFactory is shared by every Gantry plugin of the process;
	// the layer starts it with the scheduler's informers.
	GantryInformerFactory() gantryinformers.SharedInformerFactory
	// Extender is the process-wide extension layer.
	Extender() *Extender
}

// PreFilterTransformer runs before the PreFilter plugins. A plugin returning
// ok=true hands the returned pod (a copy) to the hooks and plugins after it.
type PreFilterTransformer interface {
	fwk.Plugin
	BeforePreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod) (newPod *v1.Pod, ok bool, status *fwk.Status)
}

// FilterTransformer runs before the Filter plugins, for every node. A plugin
// returning ok=true hands the returned pod and NodeInfo (copies; never modify
// nodeInfo, it belongs to the scheduler's snapshot) to what runs after it.
// As upstream skips a Filter plugin whose PreFilter returned Skip, the hook
// of a plugin whose PreFilter returned Skip is not run in that cycle: the
// per-node cost of a hook with nothing to do for the pod is nothing.
type FilterTransformer interface {
	fwk.Plugin
	BeforeFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (newPod *v1.Pod, newNodeInfo fwk.NodeInfo, ok bool, status *fwk.Status)
}

// ScoreTransformer runs before the PreScore and Score plugins with the list
// of feasible nodes. A plugin returning ok=true hands the returned pod and
// list (a new slice, copies of changed NodeInfos) to what runs after it.
type ScoreTransformer interface {
	fwk.Plugin
	BeforeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (newPod *v1.Pod, newNodes []fwk.NodeInfo, ok bool, status *fwk.Status)
}

// NodeHinter names, once PreFilter has run, one node the scheduler should
// try before it searches the cluster: the scheduler filters that node alone
// first and, if it passes, places the pod there without scoring; if it does
// not, the cycle goes on as if no hint had been given. This is how upstream
// tries a pod's nominated node and opportunistic batching's hint (KEP-5598),
// and it is what a plugin needs when the node that suits a pod best may lie
// outside the sample of nodes the scheduler filters in a large cluster
// (percentageOfNodesToScore). The hint is asked for only when upstream's
// batching has none, and only from plugins whose PreFilter did not return
// Skip; the first non-empty answer, in the order of the PreFilter list, is
// used, unless the pod has a nominated node, which the scheduler tries
// instead. HintNode runs on the
// scheduling path of every such pod: it must be cheap and bounded.
// kube-scheduler asks for hints only while the OpportunisticBatching feature
// gate is on (the default since 1.35).
type NodeHinter interface {
	fwk.Plugin
	HintNode(ctx context.Context, state fwk.CycleState, pod *v1.Pod) string
}

// SchedulerAttacher is implemented by plugins that need the built scheduler:
// its cache, queue or failure handler. AttachScheduler is called once per
// plugin instance, after upstream's Setup and before informers start.
type SchedulerAttacher interface {
	fwk.Plugin
	AttachScheduler(sched *scheduler.Scheduler) error
}

// Router registers a plugin's endpoints. Patterns are net/http ServeMux
// patterns relative to /gantry/v1/plugins/<Plugin>, e.g. "/nodes/{node}".
type Router interface {
	// Get serves GET on any scheduler instance.
	Get(pattern string, h http.HandlerFunc)
	// GetLeaderOnly serves GET on the leader; followers answer 503, because
	// the state it shows is only kept by the leader.
	GetLeaderOnly(pattern string, h http.HandlerFunc)
}

// APIServiceProvider is implemented by plugins that serve REST endpoints.
// Endpoints are registered once per plugin name, by its first instance.
type APIServiceProvider interface {
	fwk.Plugin
	RegisterEndpoints(r Router)
}

// Controller is a loop that runs while this scheduler leads.
type Controller interface {
	Name() string
	// Run blocks until ctx ends.
	Run(ctx context.Context)
}

// ControllerProvider is implemented by plugins that own controllers.
// Controllers are collected once per plugin name, from its first instance.
type ControllerProvider interface {
	fwk.Plugin
	NewControllers() ([]Controller, error)
}
