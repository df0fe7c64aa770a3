package provisioning

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// deletingGroup records the nodes it is asked to delete, and fails when
// told to.
type deletingGroup struct {
	testGroup
	deleted []string
	fail    bool
}

func (g *deletingGroup) TargetSize(context.Context) (int, error) { return 10, nil }
func (g *deletingGroup) DeleteNodes(_ context.Context, names []string) error {
	if g.fail {
		return errors.New("cloud says no")
	}
	g.deleted = append(g.deleted, names...)
	return nil
}

type oneGroup struct{ g *deletingGroup }

func (p oneGroup) NodeGroups() []nodegroups.NodeGroup { return []nodegroups.NodeGroup{p.g} }
func (p oneGroup) NodeGroupForNode(n *v1.Node) (nodegroups.NodeGroup, bool) {
	return p.g, n.Labels[nodegroups.LabelNodeGroup] == p.g.id
}

func TestScaleDown(t *testing.T) {
	ctx := context.Background()
	node := func(name string, attempt bool, taints ...v1.Taint) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{nodegroups.LabelNodeGroup: "g"}}, Spec: v1.NodeSpec{Taints: taints}}
		if attempt {
			n.Labels[nodegroups.LabelAttempt] = "uid-1"
		}
		return n
	}
	tainted := v1.Taint{Key: TaintToBeDeleted, Effect: v1.TaintEffectNoSchedule}
	nodes := []*v1.Node{
		node("empty", true),
		node("busy", true),
		node("theirs", false),               // not created by the provisioner
		node("left-tainted", true, tainted), // tainted by a pass that did not finish
		node("booked", true),                // holds a booking
	}
	busy := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{NodeName: "busy"}}
	booking := wrappers.MakeReservation("r").Available("booked").Obj()

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, provv1.AddToScheme, schedv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{busy, booking}
	nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		objs = append(objs, n.DeepCopy())
		_ = nodeIndex.Add(n)
	}
	podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = podIndex.Add(busy)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&v1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*v1.Pod).Spec.NodeName} }).Build()
	clk := testingclock.NewFakeClock(time.Now())
	g := &deletingGroup{testGroup: testGroup{id: "g"}}
	s := &ScaleDown{Reconciler: &Reconciler{Client: c, APIReader: c, Provider: oneGroup{g},
		Nodes: corelisters.NewNodeLister(nodeIndex), Pods: corelisters.NewPodLister(podIndex),
		Recorder: record.NewFakeRecorder(10), Clock: clk}, UnneededTime: time.Minute}
	taintsOf := func(name string) []v1.Taint {
		var n v1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Spec.Taints
	}

	if err := s.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(g.deleted) != 0 || len(taintsOf("left-tainted")) != 0 {
		t.Fatalf("first pass: deleted %v, left-tainted has taints %v; want nothing deleted and the stale taint gone", g.deleted, taintsOf("left-tainted"))
	}

	// Unneeded for the full time, but the provider fails: the node is
	// left usable.
	clk.Step(time.Minute)
	g.fail = true
	if err := s.RunOnce(ctx); err == nil {
		t.Fatal("a failed removal was not reported")
	}
	if got := taintsOf("empty"); len(got) != 0 {
		t.Fatalf("a node whose removal failed keeps taints %v", got)
	}

	g.fail = false
	if err := s.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"empty": true, "left-tainted": true}
	if len(g.deleted) != 2 || !want[g.deleted[0]] || !want[g.deleted[1]] {
		t.Fatalf("deleted %v, want empty and left-tainted only", g.deleted)
	}
	// A cloud provider deletes the node later: the next pass leaves it.
	if err := s.RunOnce(ctx); err != nil || len(g.deleted) != 2 {
		t.Fatalf("second removal pass: %v, deleted %v", err, g.deleted)
	}
}
