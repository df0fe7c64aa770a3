package reservation

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// cycleState marks an owner pod's cycle: PreFilter found it owns a usable
// reservation; the filter hook looks up, node by node, the ones it may use
// there and records the one it chose.
type cycleState struct {
	requests v1.ResourceList
	// chosen is written by the filter hook (nodes are filtered in parallel).
	chosen *chosenMap
	// claimed is the reservation Reserve took on the selected node.
	claimed *candidate
	// hint is the node of a reservation that holds the whole pod, if
	// PreFilter found one, for the scheduler to try first (HintNode).
	hint string
}

func (c *cycleState) Clone() fwk.StateData { return c }

func readState(state fwk.CycleState) *cycleState {
	v, err := state.Read(stateKey)
	if err != nil {
		return nil
	}
	return v.(*cycleState)
}

// PreFilter finds whether the pod owns a usable reservation (and one that
// holds it whole, for HintNode), and the preempting reservations it must
// leave room for. A pod with neither (most pods) skips the plugin, and so
// its filter hook and hint, for the rest of the cycle.
func (pl *Plugin) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	skip := fwk.NewStatus(fwk.Skip)
	if byNode := pl.store.nominatedFor(pod); byNode != nil {
		state.Write(nominatedKey, &nominatedState{byNode: byNode})
		skip = nil // the filter hook must place the nominees
	}
	if reservepod.Is(pod) {
		// A pending reservation preempts, as a pod does, only where its
		// profile's PostFilter knows reservations; elsewhere, or with
		// preemptionPolicy Never, it waits for capacity.
		never := pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever
		if never || !pl.shared.mayPreempt(pod.Spec.SchedulerName) {
			if cs, ok := state.(interface{ SetSkipAllPostFilterPlugins(bool) }); ok {
				cs.SetSkipAllPostFilterPlugins(true)
			}
		}
		return nil, skip
	}
	owns, req, hint := pl.store.ownedHint(pod)
	if !owns {
		return nil, skip
	}
	state.Write(stateKey, &cycleState{requests: req, chosen: newChosenMap(), hint: hint})
	return nil, nil
}

// HintNode names, for an owner pod, the node of one of its reservations
// that holds the whole pod. The scheduler filters only a sample of the nodes
// of a large cluster (percentageOfNodesToScore: about 500 of 5000), and an
// owner's reservations may all lie outside it; the hint makes the scheduler
// filter that node first, through the filter hook, and place the pod there
// if it passes. If it does not (a taint, the pod's own affinity, a port),
// the cycle searches the cluster as for any pod: the owner is never made to
// preempt for a reservation it cannot use.
func (pl *Plugin) HintNode(_ context.Context, state fwk.CycleState, _ *v1.Pod) string {
	if cs := readState(state); cs != nil {
		return cs.hint
	}
	return ""
}

// PreFilterExtensions: the plugin has no Filter, so preemption has nothing to update.
func (pl *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

const nominatedKey fwk.StateKey = Name + "/nominated"

// nominatedState is, for one cycle, the preempting reservations the pod
// must leave room for, by node.
type nominatedState struct{ byNode map[string][]*v1.Pod }

func (n *nominatedState) Clone() fwk.StateData { return n }

// BeforeFilter gives an owner pod, on a node holding one of its
// reservations, a copy of the node without that reservation: the in-tree
// filters then see the reserved capacity as the owner's. Of several
// reservations on one node, the first (by name) whose remaining capacity
// holds the whole pod is used, else the first one. On a node where a
// reservation of at least the pod's priority waits for its victims to
// leave, the filters see that reservation as placed.
func (pl *Plugin) BeforeFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (*v1.Pod, fwk.NodeInfo, bool, *fwk.Status) {
	if ni.Node() == nil {
		return nil, nil, false, nil
	}
	node := ni.Node().Name
	out, changed := ni, false
	if cs := readState(state); cs != nil {
		if cands := pl.store.candidatesOn(node, pod); len(cands) > 0 {
			c, whole := choose(cands, cs.requests)
			adjusted := c.adjustedFor(ni)
			cs.chosen.set(node, c, whole, adjusted)
			out, changed = adjusted, true
		}
	}
	if v, err := state.Read(nominatedKey); err == nil {
		if nominees := v.(*nominatedState).byNode[node]; len(nominees) > 0 {
			withNominees := out.Snapshot()
			for _, p := range nominees {
				pi, err := framework.NewPodInfo(p)
				if err != nil {
					return nil, nil, false, fwk.AsStatus(err)
				}
				withNominees.AddPodInfo(pi)
			}
			out, changed = withNominees, true
		}
	}
	if !changed {
		return nil, nil, false, nil
	}
	return pod, out, true, nil
}

// choose picks the reservation an owner uses on a node, and reports whether
// it holds the whole pod.
func choose(cands []candidate, req v1.ResourceList) (*candidate, bool) {
	for i := range cands {
		if fits(req, cands[i].remaining) {
			return &cands[i], true
		}
	}
	return &cands[0], false
}

// BeforeScore hands the scorers the same adjusted nodes the filters saw.
func (pl *Plugin) BeforeScore(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*v1.Pod, []fwk.NodeInfo, bool, *fwk.Status) {
	cs := readState(state)
	if cs == nil {
		return nil, nil, false, nil
	}
	var out []fwk.NodeInfo
	for i, ni := range nodes {
		if ni.Node() == nil {
			continue
		}
		if ch, ok := cs.chosen.get(ni.Node().Name); ok {
			if out == nil {
				out = append([]fwk.NodeInfo(nil), nodes...)
			}
			out[i] = ch.adjusted
		}
	}
	if out == nil {
		return nil, nil, false, nil
	}
	return pod, out, true, nil
}

// PreScore skips scoring for pods that own no reservation.
func (pl *Plugin) PreScore(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if readState(state) == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score prefers the nodes holding one of the pod's reservations, most of
// all those where the reservation holds the whole pod.
func (pl *Plugin) Score(_ context.Context, state fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	cs := readState(state)
	if cs == nil || ni.Node() == nil {
		return 0, nil
	}
	ch, ok := cs.chosen.get(ni.Node().Name)
	if !ok {
		return 0, nil
	}
	if ch.whole {
		return fwk.MaxNodeScore, nil
	}
	return fwk.MaxNodeScore / 2, nil
}

// ScoreExtensions: scores are already in range.
func (pl *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// Reserve claims the chosen reservation on the selected node for an owner
// pod, so that its capacity is not counted twice while the pod binds.
func (pl *Plugin) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, node string) *fwk.Status {
	if reservepod.Is(pod) {
		// Placed (assumed): it no longer waits for a preemption's victims.
		pl.store.nominate(pod.UID, "")
		return nil
	}
	cs := readState(state)
	if cs == nil {
		return nil
	}
	if cs.hint != "" {
		result := "used"
		if node != cs.hint {
			result = "elsewhere"
		}
		ownerHints.WithLabelValues(result).Inc()
	}
	ch, ok := cs.chosen.get(node)
	if !ok {
		return nil // placed elsewhere than on its reservations
	}
	c := ch.c
	if !pl.store.claim(c.uid, pod, node) {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("reservation %s on node %s can no longer be used; retrying", c.name, node))
	}
	cs.claimed = c
	return nil
}

// Unreserve gives the claim back when the pod does not bind.
func (pl *Plugin) Unreserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) {
	if cs := readState(state); cs != nil && cs.claimed != nil {
		pl.store.release(cs.claimed.uid, pod)
		cs.claimed = nil
	}
}

// EventsToRegister: the plugin rejects no pod, so no event makes one schedulable.
func (pl *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return nil, nil
}

// SignPod keeps owners apart in batching (KEP-5598): the name of the set of
// reservations a pod owns is part of its signature, so no owner shares one
// with a pod that owns none, or other reservations. An owner's own cycle
// never takes a batch's hint (the filter hook runs for it, see
// frameworkext's GetNodeHint); HintNode leads it to its reservation.
// Reservations themselves are not batched.
func (pl *Plugin) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if reservepod.Is(pod) {
		return nil, fwk.NewStatus(fwk.Unschedulable, "reservations are not batched")
	}
	if key := pl.store.ownerSignature(pod); key != "" {
		return []fwk.SignFragment{{Key: Name + "/owns", Value: key}}, nil
	}
	return nil, nil
}
