package asyncpreemption

import (
	"context"
	"fmt"
	"math"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// gangs is preemption for pod groups (GenericWorkload), as upstream's
// DefaultPreemption does it: the whole cluster is the domain, the group's
// members are placed together on it with the victims removed, and the
// victims are deleted asynchronously by upstream's executor, which keeps the
// group's members out of the queue (PreEnqueue) until the deletes are sent.
// No victim is deleted unless the whole group fits: upstream's evaluator
// removes every candidate victim and runs the group's own scheduling first.
type gangs struct {
	// up is an upstream DefaultPreemption with asynchronous preemption on,
	// used for its executor, its PreEnqueue and its events only.
	up *defaultpreemption.DefaultPreemption
	ev *preemption.PodGroupEvaluator
}

func newGangs(ctx context.Context, args *config.DefaultPreemptionArgs, fh fwk.Handle, fts plfeature.Features) (*gangs, error) {
	if !fts.EnableGenericWorkload {
		return nil, nil
	}
	fts.EnableAsyncPreemption = true
	up, err := defaultpreemption.New(ctx, args, fh, fts)
	if err != nil {
		return nil, err
	}
	return &gangs{up: up, ev: preemption.NewPodGroupEvaluator(fh, up.Executor, fts)}, nil
}

// PodGroupPostFilter preempts for a pod group that could not be placed. The
// victims are those of upstream's evaluator on a snapshot where Gantry's
// view of them is applied first: pods another preemption is deleting are
// gone, and a pod placed in a reservation it owns has the reservation's
// priority as a victim if that is higher (single pods; a gang's members
// have their PodGroup's priority, as upstream has it). A reservation is
// never a gang's victim: upstream's executor deletes pods, and a
// reservation's placeholder is not one.
func (pl *Plugin) PodGroupPostFilter(ctx context.Context, _ fwk.PodGroupCycleState, pgInfo fwk.PodGroupInfo, schedule fwk.PodGroupSchedulingFunc) (res *fwk.PodGroupPostFilterResult, status *fwk.Status) {
	if pl.gangs == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pod group preemption needs the GenericWorkload feature gate")
	}
	defer func() { gangAttempts.WithLabelValues(status.Code().String()).Inc() }()
	mutable := pl.fh.MutableSnapshotSharedLister()
	if err := mutable.StartMutations(); err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("pod group preemption: %w", err))
	}
	defer func() {
		if err := mutable.EndMutations(); err != nil && status.IsSuccess() {
			status = fwk.AsStatus(fmt.Errorf("pod group preemption: %w", err))
		}
	}()
	if err := pl.asVictims(klog.FromContext(ctx), mutable); err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("pod group preemption: %w", err))
	}
	res, status = pl.gangs.ev.Preempt(ctx, pgInfo, schedule)
	if msg := status.Message(); msg != "" {
		status = fwk.NewStatus(status.Code(), "pod group preemption: "+msg)
	}
	return res, status
}

// asVictims rewrites the mutable snapshot into Gantry's view of the
// victims (see PodGroupPostFilter). It reads every pod once and swaps only
// those whose view differs.
func (pl *Plugin) asVictims(logger klog.Logger, mutable fwk.MutableSnapshotSharedLister) error {
	nodes, err := mutable.NodeInfos().List()
	if err != nil {
		return err
	}
	allocs := pl.exec.allocations()
	type swap struct {
		old  *v1.Pod
		prio int32
		drop bool
	}
	for _, ni := range nodes {
		var swaps []swap
		for _, pi := range ni.GetPods() {
			p := pi.GetPod()
			switch {
			case pl.exec.preempted(p.UID):
				swaps = append(swaps, swap{old: p, drop: true})
			case reservepod.Is(p):
				// The cache holds it at the highest priority already.
				if podPriority(p) != math.MaxInt32 {
					swaps = append(swaps, swap{old: p, prio: math.MaxInt32})
				}
			case p.Spec.SchedulingGroup == nil:
				if prio := reservepod.VictimPriority(p, allocs); prio != podPriority(p) {
					swaps = append(swaps, swap{old: p, prio: prio})
				}
			}
		}
		node := ni.Node().Name
		for _, s := range swaps {
			if err := mutable.RemovePod(logger, s.old, node); err != nil {
				return err
			}
			if s.drop {
				continue
			}
			q := s.old.DeepCopy()
			q.Spec.Priority = &s.prio
			qi, err := framework.NewPodInfo(q)
			if err != nil {
				return err
			}
			if err := mutable.AddPod(qi, node); err != nil {
				return err
			}
		}
	}
	return nil
}
