package provisioning

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
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
	// beforeDelete, if set, runs when nodes are about to be deleted.
	beforeDelete func()
}

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

// listingGroup is a deletingGroup that lists its nodes, as
// nodegroups.RollBack needs.
type listingGroup struct {
	deletingGroup
	nodes []*v1.Node
}

func (g *listingGroup) Nodes(context.Context) ([]*v1.Node, error) { return g.nodes, nil }

type oneListingGroup struct{ g *listingGroup }

func (p oneListingGroup) NodeGroups() []nodegroups.NodeGroup { return []nodegroups.NodeGroup{p.g} }
func (p oneListingGroup) NodeGroupForNode(n *v1.Node) (nodegroups.NodeGroup, bool) {
	return p.g, n.Labels[nodegroups.LabelNodeGroup] == p.g.id
}

// rollBackFixture is a reconciler whose one node group has nodes of
// attempt "r1-1" (request r1's): "idle", "busy", which runs a pod, and
// "daemons", which runs a DaemonSet's pod only.
func rollBackFixture(t *testing.T) (*Reconciler, *listingGroup) {
	t.Helper()
	node := func(name string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			nodegroups.LabelNodeGroup: "g", nodegroups.LabelAttempt: "r1-1"}}}
	}
	nodes := []*v1.Node{node("idle"), node("busy"), node("daemons")}
	busy := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "p"}, Spec: v1.PodSpec{NodeName: "busy"}}
	daemon := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "d", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds", Controller: ptr.To(true)}}}, Spec: v1.PodSpec{NodeName: "daemons"}}
	scheme := testScheme(t)
	objs := []client.Object{busy, daemon}
	nodeIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		objs = append(objs, n.DeepCopy())
		_ = nodeIndex.Add(n)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&v1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*v1.Pod).Spec.NodeName} }).Build()
	g := &listingGroup{deletingGroup: deletingGroup{testGroup: testGroup{id: "g"}}, nodes: nodes}
	// The pod cache lags: it shows no pod yet.
	podIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	return &Reconciler{Client: c, APIReader: c, Provider: oneListingGroup{g}, Recorder: record.NewFakeRecorder(10),
		Nodes: corelisters.NewNodeLister(nodeIndex), Pods: corelisters.NewPodLister(podIndex)}, g
}

// withAttempt is a request of UID uid whose recorded scale-up attempt is
// attempt, both where this provisioner keeps it and where earlier versions
// did (an annotation any editor of the request can set).
func withAttempt(uid, attempt string) *provv1.ProvisioningRequest {
	pr := &provv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: uid, UID: types.UID(uid),
		Annotations: map[string]string{
			AnnotationScaleUpAttempt: attempt,
			AnnotationScaleUpPlan:    "g=1000",
			AnnotationScaleUpStarted: "2000-01-01T00:00:00Z",
		}}}
	pr.Status.ProvisioningClassDetails = map[string]provv1.Detail{
		DetailScaleUpAttempt: provv1.Detail(attempt),
		DetailScaleUpPlan:    "g=1000",
		DetailScaleUpStarted: "2000-01-01T00:00:00Z",
	}
	return pr
}

// TestRollBackForeignAttempt: a request whose recorded attempt is another
// request's (r1's, forged by the tenant of r2) deletes nothing, whether it
// is rolled back, cancelled or failed.
func TestRollBackForeignAttempt(t *testing.T) {
	ctx := context.Background()
	for _, attempt := range []string{"r1-1", "r1", "r2x-1", ""} {
		r, g := rollBackFixture(t)
		rq := newRequest(withAttempt("r2", attempt))
		if rq.scaleUpInFlight() {
			t.Errorf("attempt %q: request r2 has a scale-up in flight", attempt)
		}
		if err := r.rollBackAttempt(ctx, rq, "cancelled"); err != nil {
			t.Fatalf("attempt %q: %v", attempt, err)
		}
		if len(g.deleted) != 0 {
			t.Errorf("attempt %q recorded on request r2: nodes %v of request r1 deleted", attempt, g.deleted)
		}
	}
}

// TestRollBackKeepsBusyNodes: rolling back a request's own attempt never
// deletes a node that runs a pod (other than DaemonSet and mirror pods).
func TestRollBackKeepsBusyNodes(t *testing.T) {
	r, g := rollBackFixture(t)
	rq := newRequest(withAttempt("r1", "r1-1"))
	if !rq.scaleUpInFlight() {
		t.Fatal("request r1's own attempt is not in flight")
	}
	if err := r.rollBackAttempt(context.Background(), rq, "timed out"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(g.deleted, " "); got != "idle daemons" {
		t.Errorf("deleted %v, want idle and daemons (busy runs a pod)", g.deleted)
	}
	if rq.scaleUpInFlight() {
		t.Error("the rolled-back attempt is still in flight")
	}
}

// TestRemoveUnusedNodesKeepsBusyNodes: a deleted request's nodes that run
// a pod the cache does not show yet are kept, and another request's nodes
// are never touched.
func TestRemoveUnusedNodesKeepsBusyNodes(t *testing.T) {
	r, g := rollBackFixture(t)
	if err := r.removeUnusedNodes(context.Background(), newRequest(withAttempt("r2", "r1-1"))); err != nil {
		t.Fatal(err)
	}
	if len(g.deleted) != 0 {
		t.Errorf("request r2's removal deleted request r1's nodes %v", g.deleted)
	}
	if err := r.removeUnusedNodes(context.Background(), newRequest(withAttempt("r1", ""))); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(g.deleted, " "); got != "daemons idle" {
		t.Errorf("deleted %v, want daemons and idle (busy runs a pod)", g.deleted)
	}
}

// TestRollBackKeepsBookedNodes: a node of the request's attempt that holds
// another request's booking (placed there since; the cache does not show it
// yet) is kept by a roll-back and by a removal, while the request's own
// booking does not keep one. Before, the Reservations were looked for in
// the cache only (removal) or not at all (roll-back), and the other
// tenant's booking was lost with the node.
func TestRollBackKeepsBookedNodes(t *testing.T) {
	ctx := context.Background()
	for name, run := range map[string]func(*Reconciler) error{
		"roll-back": func(r *Reconciler) error {
			return r.rollBackAttempt(ctx, newRequest(withAttempt("r1", "r1-1")), "timed out")
		},
		"removal": func(r *Reconciler) error { return r.removeUnusedNodes(ctx, newRequest(withAttempt("r1", ""))) },
	} {
		t.Run(name, func(t *testing.T) {
			r, g := rollBackFixture(t)
			theirs := wrappers.MakeReservation("theirs").Available("idle").Obj()
			theirs.Labels = map[string]string{LabelRequestUID: "r2"}
			own := wrappers.MakeReservation("own").Available("daemons").Obj()
			own.Labels = map[string]string{LabelRequestUID: "r1"}
			for _, res := range []*schedv1alpha1.Reservation{theirs, own} {
				if err := r.APIReader.(client.Client).Create(ctx, res); err != nil {
					t.Fatal(err)
				}
			}
			r.Client = laggingCache(r.APIReader.(client.WithWatch))
			if err := run(r); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(g.deleted, " "); got != "daemons" {
				t.Errorf("deleted %v, want daemons only (idle holds another request's booking, busy a pod)", g.deleted)
			}
		})
	}
}
