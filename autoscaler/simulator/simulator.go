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
// snapshots. It holds a few instances of the framework, each with its own
// snapshot lister and DRA state: as many simulations run at once, and more
// wait for an instance.
type Simulator struct {
	// pool holds the instances not in use; its capacity is how many
	// there are.
	pool    chan *instance
	skipped []string
	// informers are the DRA objects, shared by the instances.
	informers *draInformers
}

// instance is one framework and the state its plugins read.
type instance struct {
	fw     framework.Framework
	lister *listerProxy
	dra    *draManager
	// reserveClaims is the DynamicResources plugin, which records the
	// devices it allocated for a placed pod in the simulation's claims;
	// nil when the profile does not enable it.
	reserveClaims *claimsOnly
}

// Option configures New.
type Option func(*options)

type options struct{ instances int }

// WithInstances sets how many simulations may run at once (default 1):
// each instance is a framework of the profile, with its plugins' state.
func WithInstances(n int) Option {
	return func(o *options) { o.instances = max(n, 1) }
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
// with resource claims; the instances share them.
func New(ctx context.Context, profile *config.KubeSchedulerProfile, client kubernetes.Interface, factory informers.SharedInformerFactory, opts ...Option) (*Simulator, error) {
	o := options{instances: 1}
	for _, opt := range opts {
		opt(&o)
	}
	// The framework counts its plugins in kube-scheduler's metrics.
	schedmetrics.Register()
	shared := &draInformers{factory: factory, ctx: ctx}
	consumable := utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity)
	s := &Simulator{pool: make(chan *instance, o.instances), informers: shared}
	for range o.instances {
		inst, skipped, err := newInstance(ctx, profile, client, factory, newDRAManager(shared, consumable))
		if err != nil {
			return nil, err
		}
		s.skipped = skipped
		s.pool <- inst
	}
	return s, nil
}

// unqueuedHandle is the DynamicResources plugin's handle in a simulation.
// The plugin reads the informer factory only to index pods by claim for its
// queueing hints, under a name made of the profile's, which every instance
// shares; a simulation queues nothing. It gets a factory of its own, never
// started, so the index neither clashes across instances nor costs anything.
type unqueuedHandle struct {
	fwk.Handle
	factory informers.SharedInformerFactory
}

func (h unqueuedHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }

func newInstance(ctx context.Context, profile *config.KubeSchedulerProfile, client kubernetes.Interface, factory informers.SharedInformerFactory, dra *draManager) (*instance, []string, error) {
	registry := plugins.NewInTreeRegistry()
	inst := &instance{dra: dra}
	if newDRA, ok := registry[names.DynamicResources]; ok {
		registry[names.DynamicResources] = func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			p, err := newDRA(ctx, args, unqueuedHandle{Handle: h, factory: informers.NewSharedInformerFactory(client, 0)})
			if err != nil {
				return nil, err
			}
			pl, ok := p.(*dynamicresources.DynamicResources)
			if !ok {
				return nil, fmt.Errorf("plugin %s is a %T", names.DynamicResources, p)
			}
			inst.reserveClaims = &claimsOnly{pl}
			return inst.reserveClaims, nil
		}
	}
	p, skipped := restrict(profile, func(name string) bool {
		_, known := registry[name]
		// The simulation never preempts: DefaultPreemption (and the
		// PodDisruptionBudgets it watches) is not needed.
		return known && name != names.DefaultPreemption
	})
	inst.lister = &listerProxy{SharedLister: cache.NewEmptySnapshot()}
	fw, err := frameworkruntime.NewFramework(ctx, registry, p,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(inst.lister),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithSharedDRAManager(dra),
		frameworkruntime.WithLogger(klog.FromContext(ctx).WithName("simulator")),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("building the scheduling framework of profile %q: %w", profile.SchedulerName, err)
	}
	inst.fw = fw
	return inst, skipped, nil
}

// Instances is how many simulations may run at once.
func (s *Simulator) Instances() int { return cap(s.pool) }

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

// Place is PlaceWithin with no budget.
func (s *Simulator) Place(ctx context.Context, c Cluster, sets []PodSet) (Placement, error) {
	return s.PlaceWithin(ctx, c, sets, nil)
}

// PlaceWithin puts every pod of sets on a snapshot of c, in order, each on
// the first node (existing nodes by name, then c.NewNodes) whose filters
// pass. It returns the placement, or an *Unschedulable error naming the
// first pod set that does not fit whole, or a *BudgetExceeded error when b
// (nil: none) is spent first.
//
// Pods of a set are identical, so a node that rejects one rejects the next
// (placing pods only takes capacity away): each set walks the nodes once,
// and a request of P pods on N nodes costs about P+N filter runs. Required
// pod affinity is the exception: placing a pod may open nodes to the next,
// and such a set is walked from the first node for every pod. Spread
// constraints may too: a pod that fits no node from where the last one
// went tries the nodes before it.
//
// A pod's resource claims are simulated when the profile enables
// DynamicResources (otherwise they are ignored, as that profile's scheduler
// would): a pod set naming a ResourceClaimTemplate or ResourceClaim that
// does not exist gets an *InvalidPodSet error before anything is placed.
//
// PlaceWithin waits for a free instance of the framework; ctx bounds the
// wait and the simulation.
func (s *Simulator) PlaceWithin(ctx context.Context, c Cluster, sets []PodSet, b *Budget) (Placement, error) {
	var inst *instance
	select {
	case inst = <-s.pool:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { s.pool <- inst }()
	return inst.place(ctx, c, sets, b)
}

func (inst *instance) place(ctx context.Context, c Cluster, sets []PodSet, b *Budget) (Placement, error) {
	withClaims := false
	for _, set := range sets {
		withClaims = withClaims || len(set.Pod.Spec.ResourceClaims) > 0
	}
	withClaims = withClaims && inst.reserveClaims != nil
	if withClaims {
		if err := inst.dra.informers.start(ctx); err != nil {
			return nil, err
		}
	}
	var claims []podClaims
	if withClaims {
		if err := inst.dra.begin(c.ResourceSlices); err != nil {
			return nil, err
		}
		defer inst.dra.end()
		claims = make([]podClaims, len(sets))
		for i, set := range sets {
			if len(set.Pod.Spec.ResourceClaims) > 0 {
				pc, err := inst.dra.resolveClaims(set)
				if err != nil {
					return nil, err
				}
				claims[i] = pc
			}
		}
	}
	snap := cache.NewSnapshot(c.Pods, append(append([]*v1.Node(nil), c.Nodes...), c.NewNodes...))
	inst.lister.SharedLister = snap
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
		restart := requiredAffinity(set.Pod)
		cost := cost{filter: 1, preFilter: 1}
		if CrossNode(set.Pod) {
			cost.preFilter = int64(len(nodes))
		}
		if claims != nil && claims[si] != nil {
			cost.filter += int64(len(inst.dra.slices) / slicesPerEvaluation)
		}
		next := 0
		for i := range set.Count {
			if err := ctx.Err(); err != nil {
				return nil, context.Cause(ctx)
			}
			pod := set.Pod.DeepCopy()
			pod.Name = fmt.Sprintf("%s-%d", set.Name, i)
			pod.UID = types.UID(fmt.Sprintf("simulated-%d-%d", si, i))
			pod.Spec.NodeName = ""
			if claims != nil && claims[si] != nil {
				inst.dra.makeClaims(pod, claims[si])
			}
			state := framework.NewCycleState()
			node, reason, late, err := inst.placeOne(ctx, state, nodes, pod, next, b, cost)
			if err != nil {
				return nil, err
			}
			if node == outOfBudget {
				return nil, &BudgetExceeded{PodSet: set.Name, Placed: i, Count: set.Count, Used: b.Used(), Limit: b.Evaluations, Late: late}
			}
			if node < 0 {
				return nil, &Unschedulable{PodSet: set.Name, Placed: i, Count: set.Count, Reason: reason}
			}
			pod.Spec.NodeName = nodes[node].Node().Name
			if claims != nil && claims[si] != nil {
				// The devices Filter found on the node become the claims'.
				if st := inst.reserveClaims.Reserve(ctx, state, pod, pod.Spec.NodeName); !st.IsSuccess() {
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

// cost is what a pod's PreFilter and each of its Filter runs count against
// a Budget.
type cost struct{ preFilter, filter int64 }

// outOfBudget is placeOne's node when the budget ran out.
const outOfBudget = -2

// placeOne returns the index of the first node from start whose filters
// pass for pod, or -1 and why none does, or outOfBudget (late: past the
// deadline). The plugins keep their findings in state.
func (inst *instance) placeOne(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, pod *v1.Pod, start int, b *Budget, c cost) (int, string, bool, error) {
	if ok, late := b.spend(c.preFilter); !ok {
		return outOfBudget, "", late, nil
	}
	res, st, _ := inst.fw.RunPreFilterPlugins(ctx, state, pod)
	if !st.IsSuccess() && !st.IsSkip() {
		if st.IsRejected() {
			return -1, st.Message(), false, nil
		}
		return -1, "", false, st.AsError()
	}
	reasons := map[string]int{}
	late := false
	// filter is 1 when node i fits, 0 when not, -1 when the budget is
	// gone.
	filter := func(i int) (int, error) {
		ni := nodes[i]
		if !res.AllNodes() && !res.NodeNames.Has(ni.Node().Name) {
			reasons["node(s) excluded by PreFilter"]++
			return 0, nil
		}
		var ok bool
		if ok, late = b.spend(c.filter); !ok {
			return -1, nil
		}
		st := inst.fw.RunFilterPlugins(ctx, state, pod, ni)
		if st.IsSuccess() {
			return 1, nil
		}
		if !st.IsRejected() {
			return 0, st.AsError()
		}
		for _, r := range st.Reasons() {
			reasons[r]++
		}
		return 0, nil
	}
	try := func(from, to int) (int, error) {
		for i := from; i < to; i++ {
			switch fit, err := filter(i); {
			case err != nil:
				return -1, err
			case fit < 0:
				return outOfBudget, nil
			case fit > 0:
				return i, nil
			}
		}
		return -1, nil
	}
	if i, err := try(start, len(nodes)); i != -1 || err != nil {
		return i, "", late, err
	}
	// Nothing fits from start: the nodes before it (they rejected an
	// earlier pod of the set, or spread kept it off them) are tried too,
	// and give their reasons for a message about the whole cluster.
	if i, err := try(0, start); i != -1 || err != nil {
		return i, "", late, err
	}
	return -1, summarize(len(nodes), reasons), false, nil
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
