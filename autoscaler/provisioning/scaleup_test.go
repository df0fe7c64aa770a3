package provisioning

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// testGroup is a node group of nodes of one size; only what planning
// reads is implemented.
type testGroup struct {
	nodegroups.NodeGroup
	id        string
	size, max int
	cpu       string
	labels    map[string]string
}

func (g *testGroup) ID() string                              { return g.id }
func (g *testGroup) MinSize() int                            { return 0 }
func (g *testGroup) MaxSize() int                            { return g.max }
func (g *testGroup) TargetSize(context.Context) (int, error) { return g.size, nil }
func (g *testGroup) TemplateNode() *v1.Node {
	n := st.MakeNode().Name(g.id + "-template").Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: g.cpu, v1.ResourceMemory: "16Gi", v1.ResourcePods: "110"})
	for k, v := range g.labels {
		n.Label(k, v)
	}
	return n.Obj()
}

func planner(t *testing.T) *Reconciler {
	t.Helper()
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	sim, err := simulator.New(context.Background(), &cfg.Profiles[0], client, informers.NewSharedInformerFactory(client, 0))
	if err != nil {
		t.Fatal(err)
	}
	return &Reconciler{Simulator: sim, Clock: clock.RealClock{}}
}

func cpuPod(cpu string) *v1.Pod {
	return wrappers.MakePod("p", "ns").Requests("cpu", cpu).Obj()
}

func TestPlanScaleUp(t *testing.T) {
	r := planner(t)
	ctx := context.Background()
	existing := simulator.Cluster{Nodes: []*v1.Node{st.MakeNode().Name("n1").Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "4", v1.ResourcePods: "110"}).Obj()}}
	small := &testGroup{id: "small", max: 100, cpu: "4"}
	large := &testGroup{id: "large", max: 100, cpu: "16"}
	gpu := &testGroup{id: "gpu", max: 100, cpu: "8", labels: map[string]string{"accelerator": "a100"}}

	// 20 pods of 2 CPUs: 2 on the existing node, 18 on new ones. Small
	// nodes hold 2 (9 nodes), large ones 8 (3 nodes): large wins.
	plan, err := r.planScaleUp(ctx, existing, []simulator.PodSet{{Name: "w", Pod: cpuPod("2"), Count: 20}}, []nodegroups.NodeGroup{small, large}, nil)
	if err != nil || plan.String() != "large=3" {
		t.Errorf("plan %v, %v; want large=3", plan, err)
	}

	// The group's maximum bounds it: with room for 2 large nodes, the
	// small group is used.
	capped := &testGroup{id: "large", size: 98, max: 100, cpu: "16"}
	plan, err = r.planScaleUp(ctx, existing, []simulator.PodSet{{Name: "w", Pod: cpuPod("2"), Count: 20}}, []nodegroups.NodeGroup{small, capped}, nil)
	if err != nil || plan.String() != "small=9" {
		t.Errorf("plan %v, %v; want small=9", plan, err)
	}

	// Two sets of different shapes: GPU pods need the gpu group, CPU pods
	// fill what is left on those nodes first.
	gpuPod := cpuPod("6")
	gpuPod.Spec.NodeSelector = map[string]string{"accelerator": "a100"}
	plan, err = r.planScaleUp(ctx, simulator.Cluster{}, []simulator.PodSet{
		{Name: "trainers", Pod: gpuPod, Count: 2}, {Name: "helpers", Pod: cpuPod("2"), Count: 3},
	}, []nodegroups.NodeGroup{small, gpu}, nil)
	if err != nil || plan.String() != "gpu=2,small=1" {
		t.Errorf("plan %v, %v; want gpu=2,small=1", plan, err)
	}

	// A pod no group's node can hold: no scale-up can help.
	_, err = r.planScaleUp(ctx, existing, []simulator.PodSet{{Name: "huge", Pod: cpuPod("32"), Count: 1}}, []nodegroups.NodeGroup{small, large}, nil)
	var nf *noGroupFits
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "small: 1 Insufficient cpu") || !strings.Contains(err.Error(), "large: 1 Insufficient cpu") {
		t.Errorf("a 32-CPU pod: %v, want noGroupFits naming both groups' reasons", err)
	}

	// Pods that fit a group's node, but more than the groups may add.
	full := &testGroup{id: "full", size: 10, max: 10, cpu: "16"}
	few := &testGroup{id: "few", size: 0, max: 2, cpu: "4"}
	_, err = r.planScaleUp(ctx, existing, []simulator.PodSet{{Name: "w", Pod: cpuPod("2"), Count: 20}}, []nodegroups.NodeGroup{full, few}, nil)
	var ex *groupsExhausted
	if !errors.As(err, &ex) || !strings.Contains(err.Error(), "full is at its maximum size of 10") ||
		!strings.Contains(err.Error(), "few: 2 more nodes (up to its maximum of 2) are not enough") {
		t.Errorf("groups without room: %v", err)
	}
}

func TestParsePlan(t *testing.T) {
	p, err := parsePlan("b=2,a=10")
	if err != nil || p.String() != "a=10,b=2" || p.total() != 12 {
		t.Errorf("parsePlan: %v %v", p, err)
	}
	for _, bad := range []string{"", "a", "a=", "=1", "a=0", "a=-1", "a=1,a=2", "a=1,"} {
		if _, err := parsePlan(bad); err == nil {
			t.Errorf("parsePlan(%q) accepted", bad)
		}
	}
}

func FuzzParsePlan(f *testing.F) {
	f.Add("a=1,b=2")
	f.Add("x=99999999999999999999")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePlan(s)
		if err != nil {
			return
		}
		// What parses round-trips and counts at least one node per group.
		again, err := parsePlan(p.String())
		if err != nil || again.String() != p.String() || p.total() < len(p) {
			t.Fatalf("%q parsed to %v, which reads back as %v, %v", s, p, again, err)
		}
	})
}

// A node group whose scale-up failed is left out of the plans while it is
// backed off; the next best group takes its place, and once the backoff
// ends it is planned again.
func TestPlanScaleUpSkipsBackedOffGroups(t *testing.T) {
	r := planner(t)
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	r.Clock = clk
	ctx := context.Background()
	small := &testGroup{id: "small", max: 100, cpu: "4"}
	large := &testGroup{id: "large", max: 100, cpu: "16"}
	sets := []simulator.PodSet{{Name: "w", Pod: cpuPod("2"), Count: 16}}

	r.backOff(ctx, "large", "nodes never came up")
	plan, err := r.planScaleUp(ctx, simulator.Cluster{}, sets, []nodegroups.NodeGroup{small, large}, nil)
	if err != nil || plan.String() != "small=8" {
		t.Errorf("large backed off: plan %v, %v; want small=8", plan, err)
	}
	// Only the backed-off group could hold them: retried later, not failed.
	big := []simulator.PodSet{{Name: "w", Pod: cpuPod("8"), Count: 1}}
	_, err = r.planScaleUp(ctx, simulator.Cluster{}, big, []nodegroups.NodeGroup{small, large}, nil)
	var ex *groupsExhausted
	if !errors.As(err, &ex) || !strings.Contains(err.Error(), "large is backed off until 2026-11-28T10:05:00Z") {
		t.Errorf("only a backed-off group fits: %v, want groupsExhausted naming the backoff", err)
	}
	clk.SetTime(now.Add(DefaultNodeGroupBackoff))
	plan, err = r.planScaleUp(ctx, simulator.Cluster{}, sets, []nodegroups.NodeGroup{small, large}, nil)
	if err != nil || plan.String() != "large=2" {
		t.Errorf("backoff over: plan %v, %v; want large=2", plan, err)
	}
}

func TestGroupBackoffDoublesUpToMax(t *testing.T) {
	var b groupBackoff
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var got []time.Duration
	for range 4 {
		got = append(got, b.failed("g", now, time.Minute, 3*time.Minute).Sub(now))
	}
	if want := []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 3 * time.Minute}; !slices.Equal(got, want) {
		t.Errorf("backoffs %v, want %v", got, want)
	}
	b.succeeded("g")
	if _, off := b.until("g", now); off {
		t.Error("a group that scaled up is still backed off")
	}
	if d := b.failed("g", now, time.Minute, 3*time.Minute).Sub(now); d != time.Minute {
		t.Errorf("after a success the backoff starts over at %s, want 1m", d)
	}
}
