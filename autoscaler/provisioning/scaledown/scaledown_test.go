package scaledown

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
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// deletingGroup is a node group of 10 nodes that records the nodes it is
// asked to delete, and fails when told to.
type deletingGroup struct {
	nodegroups.NodeGroup
	id      string
	deleted []string
	fail    bool
	// beforeDelete, if set, runs when nodes are about to be deleted.
	beforeDelete func()
}

func (g *deletingGroup) ID() string                              { return g.id }
func (g *deletingGroup) MinSize() int                            { return 0 }
func (g *deletingGroup) TargetSize(context.Context) (int, error) { return 10, nil }
func (g *deletingGroup) DeleteNodes(_ context.Context, names []string) error {
	if g.beforeDelete != nil {
		g.beforeDelete()
	}
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

	scheme := testScheme(t)
	objs := []client.Object{busy, booking}
	nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		objs = append(objs, n.DeepCopy())
		_ = nodeIndex.Add(n)
	}
	podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = podIndex.Add(busy)
	c := podIndexes(fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...)).Build()
	clk := testingclock.NewFakeClock(time.Now())
	g := &deletingGroup{id: "g"}
	s := &ScaleDown{Reconciler: &provisioning.Reconciler{Client: c, APIReader: c, Provider: oneGroup{g},
		Nodes: corelisters.NewNodeLister(nodeIndex), Pods: corelisters.NewPodLister(podIndex),
		Recorder: record.NewFakeRecorder(10), Clock: clk}, UnneededTime: time.Minute, wait: noWait}
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

// podIndexes are the pod field selectors scale-down lists with.
func podIndexes(b *fake.ClientBuilder) *fake.ClientBuilder {
	return b.WithIndex(&v1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*v1.Pod).Spec.NodeName} }).
		WithIndex(&v1.Pod{}, "status.nominatedNodeName", func(o client.Object) []string { return []string{o.(*v1.Pod).Status.NominatedNodeName} })
}

func noWait(context.Context, time.Duration) error { return nil }

// TestScaleDownRace: what the scheduler placed on a node while scale-down
// was tainting it keeps the node: a pod whose binding was in flight when
// the taint landed and commits within the grace period, a booking placed
// there (a Reservation that tolerates the taint), and a pending pod
// nominated there. Each is unknown to the caches, which scale-down found
// the node unneeded with. Before the fix the node was tainted and deleted
// at once: the pod's binding committed after the node was gone, and the
// Reservation was looked for in the cache only.
func TestScaleDownRace(t *testing.T) {
	tolerateAll := []v1.Toleration{{Operator: v1.TolerationOpExists}}
	for name, tc := range map[string]struct {
		// arrives is what the API server gets between the taint and
		// the end of the grace period.
		arrives client.Object
	}{
		"pod bound in flight": {arrives: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late"},
			Spec: v1.PodSpec{NodeName: "empty", Tolerations: tolerateAll}}},
		"booking placed": {arrives: wrappers.MakeReservation("late").Available("empty").Obj()},
		"pod nominated": {arrives: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late"},
			Spec: v1.PodSpec{Tolerations: tolerateAll}, Status: v1.PodStatus{NominatedNodeName: "empty"}}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "empty", Labels: map[string]string{
				nodegroups.LabelNodeGroup: "g", nodegroups.LabelAttempt: "uid-1"}}}
			scheme := testScheme(t)
			c := podIndexes(fake.NewClientBuilder().WithScheme(scheme).WithObjects(node.DeepCopy())).Build()
			// The caches: the node, no pod, no Reservation.
			nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			_ = nodeIndex.Add(node)
			podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			cached := laggingCache(c)
			// What the scheduler decided before it saw the taint commits
			// once the node is tainted; without a grace period, only
			// after the node was deleted.
			var committed bool
			commit := func() {
				if committed {
					return
				}
				committed = true
				var n v1.Node
				if err := c.Get(ctx, client.ObjectKey{Name: "empty"}, &n); err != nil || !hasTaint(&n, TaintToBeDeleted) {
					t.Fatalf("the node is not tainted when the binding commits (%v)", err)
				}
				if err := c.Create(ctx, tc.arrives.DeepCopyObject().(client.Object)); err != nil {
					t.Fatal(err)
				}
			}
			g := &deletingGroup{id: "g"}
			g.beforeDelete = commit
			clk := testingclock.NewFakeClock(time.Now())
			s := &ScaleDown{Reconciler: &provisioning.Reconciler{Client: cached, APIReader: c, Provider: oneGroup{g},
				Nodes: corelisters.NewNodeLister(nodeIndex), Pods: corelisters.NewPodLister(podIndex),
				Recorder: record.NewFakeRecorder(10), Clock: clk}, UnneededTime: time.Minute,
				wait: func(context.Context, time.Duration) error { commit(); return nil }}
			if err := s.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Minute)
			if err := s.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if !committed {
				t.Fatal("the node was never about to be removed")
			}
			if len(g.deleted) != 0 {
				t.Errorf("deleted %v although it got %s while being removed", g.deleted, name)
			}
			var n v1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: "empty"}, &n); err != nil {
				t.Fatal(err)
			}
			if hasTaint(&n, TaintToBeDeleted) {
				t.Error("the kept node is still tainted")
			}
			if since, ok := n.Annotations[AnnotationUnneededSince]; ok {
				t.Errorf("the kept node is still marked unneeded since %s", since)
			}
		})
	}
}

// TestUnneededSinceSurvivesLeaderChange: a node found unneeded by one
// leader is removed by the next once the unneeded time has passed since
// the first saw it, not since the next did.
func TestUnneededSinceSurvivesLeaderChange(t *testing.T) {
	ctx := context.Background()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "empty", Labels: map[string]string{
		nodegroups.LabelNodeGroup: "g", nodegroups.LabelAttempt: "uid-1"}}}
	scheme := testScheme(t)
	c := podIndexes(fake.NewClientBuilder().WithScheme(scheme).WithObjects(node.DeepCopy())).Build()
	podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	g := &deletingGroup{id: "g"}
	leader := func() *ScaleDown {
		// A new leader's node cache shows what the API server has.
		var n v1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: "empty"}, &n); err != nil {
			t.Fatal(err)
		}
		nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		_ = nodeIndex.Add(&n)
		return &ScaleDown{Reconciler: &provisioning.Reconciler{Client: c, APIReader: c, Provider: oneGroup{g},
			Nodes: corelisters.NewNodeLister(nodeIndex), Pods: corelisters.NewPodLister(podIndex),
			Recorder: record.NewFakeRecorder(10), Clock: clk}, UnneededTime: time.Minute, wait: noWait}
	}
	if err := leader().RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(40 * time.Second)
	if err := leader().RunOnce(ctx); err != nil || len(g.deleted) != 0 {
		t.Fatalf("second leader, 40s in: %v, deleted %v", err, g.deleted)
	}
	clk.Step(20 * time.Second)
	if err := leader().RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(g.deleted) != 1 {
		t.Errorf("deleted %v a minute after the first leader found the node unneeded, want it deleted", g.deleted)
	}
}

// testScheme knows the kinds the provisioner's fake clients hold: core,
// ProvisioningRequests and Reservations.
func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, provv1.AddToScheme, schedv1alpha1.AddToScheme, autoscalingv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}

// laggingCache is the API behind c as a cache that shows no Reservation
// yet.
func laggingCache(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*schedv1alpha1.ReservationList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
}
