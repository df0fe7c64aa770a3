package frameworkext

import (
	"context"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// extendedFramework is a profile's Framework with Gantry's phase hooks run
// before PreFilter, Filter, PreScore and Score, node hints from NodeHinter
// plugins, and the score-debug table logged after Score. Everything else is
// the upstream framework's.
type extendedFramework struct {
	framework.Framework
	ext     *Extender
	profile *profileState
	// hinted is the hint a NodeHinter gave, and in which cycle, so that
	// upstream's batching is not told it gave it (StoreScheduleResults).
	hinted atomic.Pointer[pluginHint]
}

type pluginHint struct {
	cycle int64
	node  string
}

func (f *extendedFramework) RunPreFilterPlugins(ctx context.Context, state fwk.CycleState, pod *v1.Pod) (*fwk.PreFilterResult, *fwk.Status, sets.Set[string]) {
	for _, t := range f.profile.preFilter {
		p, ok, st := t.BeforePreFilter(ctx, state, pod)
		if !st.IsSuccess() {
			return nil, st.WithPlugin(t.Name()), sets.New(t.Name())
		}
		if ok {
			pod = p
		}
	}
	return f.Framework.RunPreFilterPlugins(ctx, state, pod)
}

func (f *extendedFramework) RunFilterPlugins(ctx context.Context, state fwk.CycleState, pod *v1.Pod, info fwk.NodeInfo) *fwk.Status {
	pod, info, st := f.profile.beforeFilter(ctx, state, pod, info)
	if !st.IsSuccess() {
		return st
	}
	return f.Framework.RunFilterPlugins(ctx, state, pod, info)
}

func (f *extendedFramework) RunFilterPluginsWithNominatedPods(ctx context.Context, state fwk.CycleState, pod *v1.Pod, info fwk.NodeInfo) *fwk.Status {
	pod, info, st := f.profile.beforeFilter(ctx, state, pod, info)
	if !st.IsSuccess() {
		return st
	}
	return f.Framework.RunFilterPluginsWithNominatedPods(ctx, state, pod, info)
}

// GetNodeHint returns upstream's batching hint when it has one, else the
// first node a NodeHinter plugin names (see NodeHinter). Upstream's batching
// is not asked for a pod whose filter hooks are active (a plugin's PreFilter
// did not return Skip): before it hints, it filters and re-scores the node
// it last chose through the profile's own framework, which runs no hooks, so
// it would rank that node as the hooks do not see it (for a reservation's
// owner: full, and not its reservation's).
func (f *extendedFramework) GetNodeHint(ctx context.Context, pod *v1.Pod, signature fwk.PodSignature, state fwk.CycleState, cycleCount int64) string {
	if !f.profile.filterHooksActive(state) {
		if hint := f.Framework.GetNodeHint(ctx, pod, signature, state, cycleCount); hint != "" {
			return hint
		}
	}
	if len(f.profile.hint) == 0 {
		return ""
	}
	skip := state.GetSkipFilterPlugins()
	for _, h := range f.profile.hint {
		if skip.Has(h.Name()) {
			continue // its PreFilter returned Skip: nothing to say about this pod
		}
		if node := h.HintNode(ctx, state, pod); node != "" {
			f.hinted.Store(&pluginHint{cycle: cycleCount, node: node})
			klog.FromContext(ctx).V(4).Info("Plugin hinted a node", "plugin", h.Name(), "pod", klog.KObj(pod), "node", node)
			return node
		}
	}
	return ""
}

// StoreScheduleResults hands upstream's batching the cycle's results. A
// hint that came from a plugin is not passed on as one: the batch would
// count the pod as batched and keep no results for the pods after it.
func (f *extendedFramework) StoreScheduleResults(ctx context.Context, signature fwk.PodSignature, hintedNode, chosenNode string, otherNodes framework.SortedScoredNodes, cycleCount int64) {
	if h := f.hinted.Swap(nil); h != nil && h.cycle == cycleCount && h.node == hintedNode {
		hintedNode = ""
	}
	f.Framework.StoreScheduleResults(ctx, signature, hintedNode, chosenNode, otherNodes, cycleCount)
}

// scoreInputKey keeps, for Score, what the score hooks made of the nodes at
// PreScore: the scheduler hands both the same list, so the hooks run once.
const scoreInputKey fwk.StateKey = "gantry.dev/frameworkext-score-input"

type scoreInput struct {
	from  []fwk.NodeInfo // the list the scheduler passed
	pod   *v1.Pod
	nodes []fwk.NodeInfo
}

func (s *scoreInput) Clone() fwk.StateData { return s }

func (f *extendedFramework) RunPreScorePlugins(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	from := nodes
	pod, nodes, st := f.profile.beforeScore(ctx, state, pod, nodes)
	if !st.IsSuccess() {
		return st
	}
	if len(f.profile.score) > 0 {
		state.Write(scoreInputKey, &scoreInput{from: from, pod: pod, nodes: nodes})
	}
	return f.Framework.RunPreScorePlugins(ctx, state, pod, nodes)
}

func (f *extendedFramework) RunScorePlugins(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) ([]fwk.NodePluginScores, *fwk.Status) {
	if v, err := state.Read(scoreInputKey); err == nil && sameList(v.(*scoreInput).from, nodes) {
		in := v.(*scoreInput)
		pod, nodes = in.pod, in.nodes
	} else {
		var st *fwk.Status
		if pod, nodes, st = f.profile.beforeScore(ctx, state, pod, nodes); !st.IsSuccess() {
			return nil, st
		}
	}
	scores, st := f.Framework.RunScorePlugins(ctx, state, pod, nodes)
	if n := f.ext.DebugScores(); n > 0 && st.IsSuccess() {
		logScoreTable(ctx, f.ProfileName(), pod, scores, int(n))
	}
	return scores, st
}

func (ps *profileState) beforeFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, info fwk.NodeInfo) (*v1.Pod, fwk.NodeInfo, *fwk.Status) {
	skip := state.GetSkipFilterPlugins()
	for _, t := range ps.filter {
		if skip.Has(t.Name()) {
			continue // its PreFilter returned Skip
		}
		p, ni, ok, st := t.BeforeFilter(ctx, state, pod, info)
		if !st.IsSuccess() {
			return nil, nil, st.WithPlugin(t.Name())
		}
		if ok {
			pod, info = p, ni
		}
	}
	return pod, info, nil
}

// filterHooksActive reports whether a filter hook runs for the cycle's pod:
// its plugin's PreFilter did not return Skip.
func (ps *profileState) filterHooksActive(state fwk.CycleState) bool {
	if len(ps.filter) == 0 {
		return false
	}
	skip := state.GetSkipFilterPlugins()
	for _, t := range ps.filter {
		if !skip.Has(t.Name()) {
			return true
		}
	}
	return false
}

func (ps *profileState) beforeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*v1.Pod, []fwk.NodeInfo, *fwk.Status) {
	for _, t := range ps.score {
		p, ns, ok, st := t.BeforeScore(ctx, state, pod, nodes)
		if !st.IsSuccess() {
			return nil, nil, st.WithPlugin(t.Name())
		}
		if ok {
			pod, nodes = p, ns
		}
	}
	return pod, nodes, nil
}

// sameList reports whether a and b are the same slice (not merely equal).
func sameList(a, b []fwk.NodeInfo) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
