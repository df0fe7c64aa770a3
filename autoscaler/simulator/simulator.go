// Package simulator places the pods of a ProvisioningRequest on a copy of
// the cluster with the filter plugins of a kube-scheduler profile: the
// upstream scheduling framework runs in-process over a snapshot of nodes,
// bound pods and booked capacity, so a request fits exactly when Gantry's
// scheduler would place its pods (not by a re-derived resource sum).
//
// Pods with resource claims are simulated with the profile's
// DynamicResources plugin over the cluster's DeviceClasses, ResourceSlices
// and ResourceClaims: each simulated pod gets the claims its ResourceClaim
// templates would make, and the devices allocated to a placed pod are taken
// for the next. Nothing is written to the API server.
package simulator

import (
	"context"
	"fmt"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// Simulator runs one profile's PreFilter and Filter plugins over
// snapshots. Simulations are serialized: the framework's plugins read the
// snapshot through one lister.
type Simulator struct {
	mu      sync.Mutex
	fw      framework.Framework
	lister  *listerProxy
	dra     *draManager
	skipped []string
	// reserveClaims is the DynamicResources plugin, which records the
	// devices it allocated for a placed pod in the simulation's claims;
	// nil when the profile does not enable it.
	reserveClaims *claimsOnly
}

// New builds the framework of profile with the in-tree plugins it enables.
// Plugins the in-tree registry does not know (Gantry's Reservation and
// AsyncPreemption: neither filters; reserved capacity is in the snapshot)
// and DefaultPreemption (the simulation never preempts) are left out;
// Skipped lists them.
//
// DynamicResources runs as in the scheduler, over the simulation's
// DRA state. Its objects come from factory's resource.k8s.io informers,
// which start (and live as long as ctx) when a simulation first has a pod
// with resource claims.
func New(ctx context.Context, profile *config.KubeSchedulerProfile, client kubernetes.Interface, factory informers.SharedInformerFactory) (*Simulator, error) {
	// The framework counts its plugins in kube-scheduler's metrics.
	schedmetrics.Register()
	registry := plugins.NewInTreeRegistry()
	s := &Simulator{dra: newDRAManager(ctx, factory, utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity))}
	if newDRA, ok := registry[names.DynamicResources]; ok {
		registry[names.DynamicResources] = func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			p, err := newDRA(ctx, args, h)
			if err != nil {
				return nil, err
			}
			pl, ok := p.(*dynamicresources.DynamicResources)
			if !ok {
				return nil, fmt.Errorf("plugin %s is a %T", names.DynamicResources, p)
			}
			s.reserveClaims = &claimsOnly{pl}
			return s.reserveClaims, nil
		}
	}
	p, skipped := restrict(profile, func(name string) bool {
		_, known := registry[name]
		// The simulation never preempts: DefaultPreemption (and the
		// PodDisruptionBudgets it watches) is not needed.
		return known && name != names.DefaultPreemption
	})
	s.lister = &listerProxy{SharedLister: cache.NewEmptySnapshot()}
	fw, err := frameworkruntime.NewFramework(ctx, registry, p,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(s.lister),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithSharedDRAManager(s.dra),
		frameworkruntime.WithLogger(klog.FromContext(ctx).WithName("simulator")),
	)
	if err != nil {
		return nil, fmt.Errorf("building the scheduling framework of profile %q: %w", profile.SchedulerName, err)
	}
	s.fw, s.skipped = fw, skipped
	return s, nil
}

// Skipped are the profile's plugins the simulation does not run.
func (s *Simulator) Skipped() []string { return s.skipped }

// restrict copies profile without the plugins keep rejects.
func restrict(profile *config.KubeSchedulerProfile, keep func(string) bool) (*config.KubeSchedulerProfile, []string) {
	p := profile.DeepCopy()
	dropped := sets.New[string]()
	filter := func(ps []config.Plugin) []config.Plugin {
		out := ps[:0]
		for _, pl := range ps {
			if pl.Name == "*" || keep(pl.Name) {
				out = append(out, pl)
			} else {
				dropped.Insert(pl.Name)
			}
		}
		return out
	}
	if p.Plugins != nil {
		for _, set := range []*config.PluginSet{&p.Plugins.MultiPoint, &p.Plugins.PreEnqueue, &p.Plugins.QueueSort,
			&p.Plugins.PreFilter, &p.Plugins.Filter, &p.Plugins.PostFilter, &p.Plugins.PreScore, &p.Plugins.Score,
			&p.Plugins.Reserve, &p.Plugins.Permit, &p.Plugins.PreBind, &p.Plugins.Bind, &p.Plugins.PostBind} {
			set.Enabled = filter(set.Enabled)
		}
		// A profile whose binders were all Gantry's still needs one.
		if len(p.Plugins.Bind.Enabled) == 0 && len(p.Plugins.Bind.Disabled) > 0 {
			p.Plugins.Bind.Enabled = []config.Plugin{{Name: names.DefaultBinder}}
		}
	}
	var cfgs []config.PluginConfig
	for _, c := range p.PluginConfig {
		if keep(c.Name) {
			cfgs = append(cfgs, c)
		}
	}
	p.PluginConfig = cfgs
	return p, sets.List(dropped)
}

// listerProxy is the framework's snapshot lister; each simulation points
// it at its own snapshot.
type listerProxy struct{ fwk.SharedLister }

// Cluster is what a simulation starts from.
type Cluster struct {
	Nodes []*v1.Node
	// Pods are the pods that hold capacity: bound (spec.nodeName set) and
	// not terminated. Booked capacity (reservations) comes as pods too.
	Pods []*v1.Pod
	// NewNodes are nodes a scale-up would add. They are tried after every
	// node of Nodes, in their order, so pods take existing room first and
	// the new nodes they use form a prefix as far as packing allows.
	NewNodes []*v1.Node
	// ResourceSlices are the devices NewNodes would publish (slices naming
	// them in spec.nodeName), added to the cluster's. Only pods with
	// resource claims read them.
	ResourceSlices []*resourceapi.ResourceSlice
}

// PodSet is count pods of one shape.
type PodSet struct {
	Name  string
	Pod   *v1.Pod
	Count int
}

// Placement is where a simulation put the pods: per pod set, one node name
// per pod.
type Placement map[string][]string

// Unschedulable is the simulation's answer when a pod set does not fit.
type Unschedulable struct {
	PodSet string
	// Placed is how many of its pods did fit before one did not.
	Placed, Count int
	// Reason is the framework's, for the first pod that did not fit.
	Reason string
}

func (u *Unschedulable) Error() string {
	return fmt.Sprintf("pod set %s: %d of %d pods fit; the next: %s", u.PodSet, u.Placed, u.Count, u.Reason)
}

// Place puts every pod of sets on a snapshot of c, in order, each on the
// first node (existing nodes by name, then c.NewNodes) whose filters pass. It returns the placement, or an
// *Unschedulable error naming the first pod set that does not fit whole.
//
// Pods of a set are identical, so a node that rejects one rejects the next
// (placing pods only takes capacity away): each set walks the nodes once,
// and a request of P pods on N nodes costs about P+N filter runs.
// Affinity between the request's own pods is the exception: such a set is
// walked from the first node for every pod.
//
// A pod's resource claims are simulated when the profile enables
// DynamicResources (otherwise they are ignored, as that profile's scheduler
// would): a pod set naming a ResourceClaimTemplate or ResourceClaim that
// does not exist gets an *InvalidPodSet error before anything is placed.
func (s *Simulator) Place(ctx context.Context, c Cluster, sets []PodSet) (Placement, error) {
	withClaims := false
	for _, set := range sets {
		withClaims = withClaims || len(set.Pod.Spec.ResourceClaims) > 0
	}
	withClaims = withClaims && s.reserveClaims != nil
	if withClaims {
		if err := s.dra.informers.start(ctx); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var claims []podClaims
	if withClaims {
		if err := s.dra.begin(c.ResourceSlices); err != nil {
			return nil, err
		}
		defer s.dra.end()
		claims = make([]podClaims, len(sets))
		for i, set := range sets {
			if len(set.Pod.Spec.ResourceClaims) > 0 {
				pc, err := s.dra.resolveClaims(set)
				if err != nil {
					return nil, err
				}
				claims[i] = pc
			}
		}
	}
	snap := cache.NewSnapshot(c.Pods, append(append([]*v1.Node(nil), c.Nodes...), c.NewNodes...))
	s.lister.SharedLister = snap
	nodes, err := snap.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	order := make(map[string]int, len(c.NewNodes))
	for i, n := range c.NewNodes {
		order[n.Name] = i + 1
	}
	sort.Slice(nodes, func(i, j int) bool {
		a, b := nodes[i].Node().Name, nodes[j].Node().Name
		if order[a] != order[b] {
			return order[a] < order[b]
		}
		return a < b
	})

	out := Placement{}
	for si, set := range sets {
		restart := set.Pod.Spec.Affinity != nil && (set.Pod.Spec.Affinity.PodAffinity != nil || set.Pod.Spec.Affinity.PodAntiAffinity != nil)
		next := 0
		for i := range set.Count {
			pod := set.Pod.DeepCopy()
			pod.Name = fmt.Sprintf("%s-%d", set.Name, i)
			pod.UID = types.UID(fmt.Sprintf("simulated-%d-%d", si, i))
			pod.Spec.NodeName = ""
			if claims != nil && claims[si] != nil {
				s.dra.makeClaims(pod, claims[si])
			}
			state := framework.NewCycleState()
			node, reason, err := s.placeOne(ctx, state, nodes, pod, next)
			if err != nil {
				return nil, err
			}
			if node < 0 {
				return nil, &Unschedulable{PodSet: set.Name, Placed: i, Count: set.Count, Reason: reason}
			}
			pod.Spec.NodeName = nodes[node].Node().Name
			if claims != nil && claims[si] != nil {
				// The devices Filter found on the node become the claims'.
				if st := s.reserveClaims.Reserve(ctx, state, pod, pod.Spec.NodeName); !st.IsSuccess() {
					return nil, fmt.Errorf("allocating the resource claims of pod set %s on node %s: %w", set.Name, pod.Spec.NodeName, st.AsError())
				}
			}
			pi, err := framework.NewPodInfo(pod)
			if err != nil {
				return nil, err
			}
			if err := snap.AssumePod(pi); err != nil {
				return nil, err
			}
			out[set.Name] = append(out[set.Name], pod.Spec.NodeName)
			if !restart {
				next = node
			}
		}
	}
	return out, nil
}

// placeOne returns the index of the first node from start whose filters
// pass for pod, or -1 and why none does. The plugins keep their findings in
// state.
func (s *Simulator) placeOne(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, pod *v1.Pod, start int) (int, string, error) {
	res, st, _ := s.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() && !st.IsSkip() {
		if st.IsRejected() {
			return -1, st.Message(), nil
		}
		return -1, "", st.AsError()
	}
	reasons := map[string]int{}
	filter := func(i int) (bool, error) {
		ni := nodes[i]
		if !res.AllNodes() && !res.NodeNames.Has(ni.Node().Name) {
			reasons["node(s) excluded by PreFilter"]++
			return false, nil
		}
		st := s.fw.RunFilterPlugins(ctx, state, pod, ni)
		if st.IsSuccess() {
			return true, nil
		}
		if !st.IsRejected() {
			return false, st.AsError()
		}
		for _, r := range st.Reasons() {
			reasons[r]++
		}
		return false, nil
	}
	for i := start; i < len(nodes); i++ {
		if ok, err := filter(i); ok || err != nil {
			return i, "", err
		}
	}
	// Nothing fits: the nodes skipped (they rejected an earlier pod of the
	// set) give their reasons too, for a message about the whole cluster.
	for i := range start {
		if ok, err := filter(i); ok || err != nil {
			return i, "", err
		}
	}
	return -1, summarize(len(nodes), reasons), nil
}

// summarize is a message like the scheduler's: "0/3 nodes are available:
// 2 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."
func summarize(nodes int, reasons map[string]int) string {
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if reasons[keys[i]] != reasons[keys[j]] {
			return reasons[keys[i]] > reasons[keys[j]]
		}
		return keys[i] < keys[j]
	})
	msg := fmt.Sprintf("0/%d nodes are available", nodes)
	for i, k := range keys {
		if i == 0 {
			msg += ": "
		} else {
			msg += ", "
		}
		msg += fmt.Sprintf("%d %s", reasons[k], k)
	}
	return msg + "."
}
