package asyncpreemption

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/utils/ptr"

	gantryconfig "github.com/gantry-dev/gantry/scheduler/apis/config"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "AsyncPreemption"

// Plugin chooses victims with upstream's preemption evaluator and runs the
// API work asynchronously in its own executor.
type Plugin struct {
	fh       fwk.Handle
	args     *gantryconfig.AsyncPreemptionArgs
	upstream *defaultpreemption.DefaultPreemption // victim selection, as upstream
	ev       *preemption.Evaluator
	exec     *executor
	gangs    *gangs // nil without GenericWorkload
}

var (
	_ fwk.PostFilterPlugin         = &Plugin{}
	_ fwk.PodGroupPostFilterPlugin = &Plugin{}
	_ fwk.PreEnqueuePlugin         = &Plugin{}
	_ fwk.EnqueueExtensions        = &Plugin{}
	_ preemption.Interface         = &Plugin{}

	_ frameworkext.SchedulerAttacher = &Plugin{}
)

// New builds the plugin; args are validated here.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	registerMetrics()
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	// Upstream's plugin is used for its victim selection only; its own
	// asynchronous executor never runs.
	fts.EnableAsyncPreemption = false
	upArgs := &config.DefaultPreemptionArgs{
		MinCandidateNodesPercentage: args.MinCandidateNodesPercentage,
		MinCandidateNodesAbsolute:   args.MinCandidateNodesAbsolute,
	}
	up, err := defaultpreemption.New(ctx, upArgs, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	gangs, err := newGangs(ctx, upArgs, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := &Plugin{fh: fh, args: args, upstream: up, gangs: gangs,
		exec: newExecutor(fh, int(args.MaxConcurrentDeletes), args.PreemptionTimeout.Duration)}
	if eh, ok := fh.(frameworkext.ExtendedHandle); ok {
		pl.exec.reservations = eh.GantryClientSet().SchedulingV1alpha1().Reservations()
		ext := eh.Extender()
		pl.exec.lookupProvider = func() reservepod.Provider { return reservepod.ProviderOf(ext) }
	}
	// The evaluator runs no API work (pl.exec does), but reads upstream's
	// executor for the features it was built with.
	pl.ev = preemption.NewEvaluator(Name, fh, pl, up.Executor)
	pl.exec.preemptorGone = preemptorGone(pl.ev.PodLister)
	return pl, nil
}

// Name returns the plugin's name.
func (pl *Plugin) Name() string { return Name }

// AttachScheduler gives the executor the scheduler's cache: a preemptor is
// re-activated once its victims have left it.
func (pl *Plugin) AttachScheduler(sched *scheduler.Scheduler) error {
	c := sched.Cache
	pl.exec.inCache = func(p *v1.Pod) bool {
		cached, err := c.GetPod(p)
		return err == nil && aboutToLeave(cached)
	}
	return nil
}

// aboutToLeave reports whether a victim the cache still holds is worth
// waiting for: it is not terminating yet, or it was deleted with no grace
// period and nothing holds it, so kube-apiserver, having written its
// deletion timestamp, removes it a moment later. Re-activated before that
// removal, the preemptor would fail a whole cycle on the room the victim
// still holds, and PostFilter would then refuse to preempt again for a
// terminating pod on the nominated node. A victim with a grace period or
// finalizers may stay for long: the preemptor is let go, and the victim's
// deletion event requeues it.
func aboutToLeave(p *v1.Pod) bool {
	if p.DeletionTimestamp == nil {
		return true
	}
	return ptr.Deref(p.DeletionGracePeriodSeconds, 0) == 0 && len(p.Finalizers) == 0
}

// PostFilter chooses a node and victims as upstream does, nominates the
// preemptor there, starts the API work, and returns at once.
func (pl *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	attempts.Inc()
	logger := klog.FromContext(ctx)
	// A pending reservation's pod is rebuilt from the reservation for each
	// cycle: it is current and is no Pod to look up.
	if !reservepod.Is(pod) {
		latest, err := pl.ev.PodLister.Pods(pod.Namespace).Get(pod.Name)
		if err != nil {
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("preemption: preemptor is gone: %v", err))
		}
		pod = latest
	}
	if ok, msg := pl.PodEligibleToPreemptOthers(ctx, pod, m.Get(pod.Status.NominatedNodeName)); !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, "preemption: "+msg)
	}
	// The victims of this pod's last preemption may still be in the
	// scheduler's cache (the informer lags the deletes): preempting again
	// would take more victims than needed. Their deletion events requeue it.
	if node, waiting := pl.exec.pendingVictims(pod.UID, pl.stillOnNode); waiting {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("preemption: waiting for the victims preempted on node %s to leave", node))
	}
	all, err := pl.fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	var potential []fwk.NodeInfo
	for _, ni := range all {
		// Nodes rejected for a reason removing pods cannot fix are skipped.
		if m.Get(ni.Node().Name).Code() != fwk.UnschedulableAndUnresolvable {
			potential = append(potential, ni)
		}
	}
	notHelpful := func(detail string) (*fwk.PostFilterResult, *fwk.Status) {
		return framework.NewPostFilterResultWithNominatedNode(""),
			fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("preemption: 0/%d nodes are available: %s", len(all), detail))
	}
	if len(potential) == 0 {
		return notHelpful("preemption is not helpful for scheduling")
	}
	pdbs, err := pl.ev.PdbLister.List(labels.Everything())
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	// Victim selection runs for many nodes in parallel: it reads one copy of
	// the victims already being preempted rather than the executor's lock.
	state.Write(preemptedKey, &preemptedSet{uids: pl.exec.preemptedNow()})
	offset, num := pl.GetOffsetAndNumCandidates(int32(len(potential)))
	candidates, _, err := pl.ev.DryRunPreemption(ctx, state, pod, potential, pdbs, offset, num)
	if err != nil && len(candidates) == 0 {
		return nil, fwk.AsStatus(err)
	}
	if len(candidates) == 0 {
		return notHelpful("no node where removing lower-priority pods makes room")
	}
	best := pl.ev.SelectCandidate(ctx, candidates)
	if best == nil || best.Name() == "" {
		return nil, fwk.NewStatus(fwk.Unschedulable, "preemption: no candidate node")
	}
	logger.V(2).Info("Preempting", "pod", klog.KObj(pod), "node", best.Name(), "victims", klog.KObjSlice(best.Victims().Pods))
	pl.exec.start(pod, best.Name(), best.Victims().Pods)
	return framework.NewPostFilterResultWithNominatedNode(best.Name()), fwk.NewStatus(fwk.Success)
}

const preemptedKey fwk.StateKey = Name + "/preempted"

// preemptedSet is the executor's victims as one PostFilter saw them.
type preemptedSet struct{ uids sets.Set[types.UID] }

func (p *preemptedSet) Clone() fwk.StateData { return p }

// stillOnNode reports whether the scheduler's snapshot still has the pod on node.
func (pl *Plugin) stillOnNode(node string, uid types.UID) bool {
	ni, err := pl.fh.SnapshotSharedLister().NodeInfos().Get(node)
	if err != nil {
		return false
	}
	for _, pi := range ni.GetPods() {
		if pi.GetPod().UID == uid {
			return true
		}
	}
	return false
}

// PreEnqueue keeps a preemptor out of the scheduling cycle while its
// preemption's API work runs; the executor re-activates it when the work ends.
func (pl *Plugin) PreEnqueue(ctx context.Context, pod *v1.Pod) *fwk.Status {
	if pl.exec.running(pod.UID) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "waiting for this pod's preemption to finish")
	}
	if pl.exec.backingOff(pod.UID) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "backing off after this pod's preemption failed")
	}
	if pl.gangs != nil {
		// A pod group's members wait while its preemption's deletes run.
		return pl.gangs.up.PreEnqueue(ctx, pod)
	}
	return nil
}

// EventsToRegister: a pod gated by PreEnqueue is re-activated by the
// executor itself, so no cluster event needs to wake it. Pod groups'
// preemption is upstream's, which waits for its last victim's deletion.
func (pl *Plugin) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	if pl.gangs != nil {
		return pl.gangs.up.EventsToRegister(ctx)
	}
	return nil, nil
}

// preemption.Interface, delegated to upstream's DefaultPreemption: victims
// are chosen exactly as upstream chooses them.

func (pl *Plugin) GetOffsetAndNumCandidates(nodes int32) (int32, int32) {
	return pl.upstream.GetOffsetAndNumCandidates(nodes)
}

func (pl *Plugin) CandidatesToVictimsMap(candidates []preemption.Candidate) map[string]*extenderv1.Victims {
	return pl.upstream.CandidatesToVictimsMap(candidates)
}

func (pl *Plugin) PodEligibleToPreemptOthers(ctx context.Context, pod *v1.Pod, nominatedNodeStatus *fwk.Status) (bool, string) {
	return pl.upstream.PodEligibleToPreemptOthers(ctx, pod, nominatedNodeStatus)
}

// SelectVictimsOnNode is upstream's, on a node where reservations and the
// pods placed in them have their priority as victims (see
// reservepod.VictimPriority): an Available reservation of lower priority
// than the preemptor is a candidate victim, and an owner pod keeps its
// reservation's protection. nodeInfo is the evaluator's copy; the victims
// the evaluator listed from the shared node are listed again from it.
func (pl *Plugin) SelectVictimsOnNode(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo, _ []*preemption.DomainVictim, pdbs []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	logger := klog.FromContext(ctx)
	// Victims another preemption is deleting, or has deleted while the
	// cache still shows them, are as good as gone: counting them again
	// would take more victims than needed.
	isPreempted := pl.exec.preempted
	if v, err := state.Read(preemptedKey); err == nil {
		set := v.(*preemptedSet).uids
		isPreempted = func(uid types.UID) bool { return set.Has(uid) }
	}
	var gone []*v1.Pod
	for _, pi := range nodeInfo.GetPods() {
		if p := pi.GetPod(); isPreempted(p.UID) {
			gone = append(gone, p)
		}
	}
	for _, p := range gone {
		if err := nodeInfo.RemovePod(logger, p); err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
	}
	allocs := pl.exec.allocations()
	if err := withVictimPriorities(logger, nodeInfo, allocs); err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	victims, err := pl.ev.GetVictimsOnNode(ctx, nodeInfo)
	if err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	victims, err = groupVictims(victims, isPreempted, allocs)
	if err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	return pl.upstream.SelectVictimsOnNode(ctx, state, pod, nodeInfo, victims, pdbs)
}

// groupVictims fixes the victims that are gangs (PodGroups evicted whole,
// listed only with GenericWorkload on). Their members come from the
// scheduler's snapshot, not the node copy: a member already being preempted
// leaves the gang (removing it again would fail the node), and a member an
// owned reservation protects protects the whole gang, which is evicted as
// one. Single pods were listed from the node copy and are kept as they are.
func groupVictims(victims []*preemption.DomainVictim, isPreempted func(types.UID) bool, allocs reservepod.Allocations) ([]*preemption.DomainVictim, error) {
	out := victims[:0]
	for _, dv := range victims {
		if !dv.IsGroup() {
			out = append(out, dv)
			continue
		}
		prio := dv.Priority()
		var pods []fwk.PodInfo
		for _, pi := range dv.Pods() {
			p := pi.GetPod()
			if isPreempted(p.UID) {
				continue
			}
			pods = append(pods, pi)
			// The reservation's own priority, not the member's: a member
			// listed from the node copy has it as its priority already.
			if allocs != nil {
				if r, ok := allocs.AllocatedPriority(p); ok && r > prio {
					prio = r
				}
			}
		}
		if len(pods) == 0 {
			continue
		}
		if len(pods) == len(dv.Pods()) && prio == dv.Priority() {
			out = append(out, dv)
			continue
		}
		v, err := preemption.NewVictim(pods, prio, dv.Type())
		if err != nil {
			return nil, err
		}
		// A copy keeps the victim's affected nodes, which only upstream sets.
		fixed := *dv
		fixed.Victim = v
		out = append(out, &fixed)
	}
	return out, nil
}

// withVictimPriorities rewrites, in a node copy, the priority of the pods
// whose victim priority differs from their own. allocs (the Reservation
// plugin's store, or nil without it) vouches for owner pods placed in a
// reservation; a pod's allocation annotation alone changes nothing.
func withVictimPriorities(logger klog.Logger, nodeInfo fwk.NodeInfo, allocs reservepod.Allocations) error {
	var swap []*v1.Pod
	var want []int32
	for _, pi := range nodeInfo.GetPods() {
		p := pi.GetPod()
		if prio := reservepod.VictimPriority(p, allocs); prio != podPriority(p) {
			swap = append(swap, p)
			want = append(want, prio)
		}
	}
	for i, p := range swap {
		q := p.DeepCopy()
		q.Spec.Priority = &want[i]
		if err := nodeInfo.RemovePod(logger, p); err != nil {
			return err
		}
		qi, err := framework.NewPodInfo(q)
		if err != nil {
			return err
		}
		nodeInfo.AddPodInfo(qi)
	}
	return nil
}

func (pl *Plugin) OrderedScoreFuncs(ctx context.Context, nodesToVictims map[string]*extenderv1.Victims) []func(node string) int64 {
	return pl.upstream.OrderedScoreFuncs(ctx, nodesToVictims)
}
