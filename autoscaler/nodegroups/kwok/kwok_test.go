package kwok

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

const good = `
nodeGroups:
- name: cpu-4
  minSize: 0
  maxSize: 3
  labels: {pool: general}
  taints: [{key: dedicated, value: batch, effect: NoSchedule}]
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
- name: flaky
  maxSize: 10
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  failureInjection: {neverReady: 1, createErrors: 1}
`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NodeGroups) != 2 || c.NodeGroups[0].Capacity.Cpu().String() != "4" {
		t.Errorf("parsed %+v", c)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"nodeGroups: [{name: Bad_Name, maxSize: 1, capacity: {cpu: 1, memory: 1Gi, pods: 1}}]", `nodeGroups[0].name "Bad_Name"`},
		{"nodeGroups: [{name: a, minSize: 2, maxSize: 1, capacity: {cpu: 1, memory: 1Gi, pods: 1}}]", "0 <= minSize <= maxSize"},
		{"nodeGroups: [{name: a, maxSize: 1, capacity: {cpu: 1, pods: 1}}]", "nodeGroups[0].capacity.memory must be positive"},
		{"nodeGroups: [{name: a, maxSize: 1, capacity: {cpu: 1, memory: 1Gi, pods: 1}}, {name: a, maxSize: 1, capacity: {cpu: 1, memory: 1Gi, pods: 1}}]", `"a": duplicate`},
		{"nodeGroups: [{name: a, maxSize: 1, labels: {autoscaling.gantry.dev/node-group: x}, capacity: {cpu: 1, memory: 1Gi, pods: 1}}]", "is set by the provider"},
		{"nodeGroups: [{name: a, maxSize: 1, capacity: {cpu: 1, memory: 1Gi, pods: 1}, failureInjection: {neverReady: -1}}]", "must not be negative"},
		{"nodeGroups: [{name: a, maxSize: 1, cpu: 4}]", "unknown field"},
	} {
		if _, err := ParseConfig([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(good)
	f.Add("nodeGroups: [{name: a, maxSize: 1}]")
	f.Fuzz(func(t *testing.T, data string) {
		c, err := ParseConfig([]byte(data))
		if err != nil {
			return
		}
		// Whatever parses is a usable provider.
		for _, g := range New(c, fake.NewClientset()).NodeGroups() {
			if g.MaxSize() < g.MinSize() || g.TemplateNode().Status.Allocatable.Cpu().Sign() <= 0 {
				t.Fatalf("accepted group %s with sizes %d..%d", g.ID(), g.MinSize(), g.MaxSize())
			}
		}
	})
}

func TestScaleUpAndDown(t *testing.T) {
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	p := New(c, client)
	ctx := context.Background()
	g := p.NodeGroups()[0]

	if _, err := g.IncreaseSize(ctx, 4, "a1"); err == nil || !strings.Contains(err.Error(), "exceed its maximum of 3") {
		t.Fatalf("4 nodes in a group of at most 3: %v", err)
	}
	if n, _ := g.TargetSize(ctx); n != 0 {
		t.Fatalf("a refused scale-up created %d nodes", n)
	}
	names, err := g.IncreaseSize(ctx, 2, "a1")
	if err != nil || strings.Join(names, " ") != "cpu-4-a1-0 cpu-4-a1-1" {
		t.Fatalf("scale-up: %v, %v", names, err)
	}
	// Retried (the provisioner restarted mid-call): nothing twice.
	if again, err := g.IncreaseSize(ctx, 2, "a1"); err == nil {
		t.Errorf("a retried attempt past the maximum was accepted: %v", again)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "cpu-4-a1-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[nodegroups.LabelAttempt] != "a1" || n.Labels["pool"] != "general" || n.Annotations[KwokAnnotation] != "fake" ||
		len(n.Spec.Taints) != 1 || n.Status.Allocatable.Cpu().String() != "4" {
		t.Errorf("created node %+v", n)
	}
	if got, ok := p.NodeGroupForNode(n); !ok || got.ID() != "cpu-4" {
		t.Errorf("NodeGroupForNode = %v, %v", got, ok)
	}
	foreign := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"}}
	if _, ok := p.NodeGroupForNode(foreign); ok {
		t.Error("a node no group created was claimed")
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteNodes(ctx, []string{"kwok-node-0"}); err == nil {
		t.Error("a group deleted a node it does not own")
	}
	if err := g.DeleteNodes(ctx, []string{"cpu-4-a1-0", "cpu-4-a1-1", "gone"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := g.TargetSize(ctx); n != 0 {
		t.Errorf("%d nodes left after deleting them all", n)
	}
}

func TestFailureInjection(t *testing.T) {
	c, _ := ParseConfig([]byte(good))
	client := fake.NewClientset()
	g := New(c, client).NodeGroups()[1]
	names, err := g.IncreaseSize(context.Background(), 4, "b7")
	if err == nil || !strings.Contains(err.Error(), "creating node flaky-b7-3: injected failure") {
		t.Fatalf("error %v, want the injected create failure", err)
	}
	if len(names) != 3 {
		t.Fatalf("created %v, want the 3 that did not fail", names)
	}
	n, _ := client.CoreV1().Nodes().Get(context.Background(), "flaky-b7-0", metav1.GetOptions{})
	if len(n.Spec.Taints) == 0 || n.Spec.Taints[len(n.Spec.Taints)-1].Key != nodegroups.TaintUninitialized {
		t.Errorf("a node injected never to be Ready has taints %v, want the uninitialized taint", n.Spec.Taints)
	}
	if _, managed := n.Annotations[KwokAnnotation]; managed {
		t.Error("the never-Ready node is handed to kwok")
	}
}

// TestDeleteNodesHonoursMinSize: like the Cluster API provider, a group
// deletes nothing that would leave it below its minimum size.
func TestDeleteNodesHonoursMinSize(t *testing.T) {
	c, err := ParseConfig([]byte("nodeGroups: [{name: small, minSize: 2, maxSize: 4, capacity: {cpu: \"1\", memory: 1Gi, pods: \"10\"}}]"))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	g := New(c, client).NodeGroups()[0]
	ctx := context.Background()
	names, err := g.IncreaseSize(ctx, 3, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteNodes(ctx, names[:2]); err == nil || !strings.Contains(err.Error(), "fewer than its minimum of 2") {
		t.Errorf("deleting 2 of 3 nodes of a group of at least 2: %v", err)
	}
	if n, _ := g.TargetSize(ctx); n != 3 {
		t.Errorf("%d nodes left after a refused deletion, want 3", n)
	}
	// The same node twice, and one already gone, count once and not at all.
	if err := g.DeleteNodes(ctx, []string{names[0], names[0], "gone"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := g.TargetSize(ctx); n != 2 {
		t.Errorf("%d nodes left, want 2", n)
	}
	if err := g.DeleteNodes(ctx, names[1:2]); err == nil {
		t.Error("a group at its minimum size deleted a node")
	}
}
