package simulator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/gantry-dev/gantry/test/wrappers"
)

// newSimulator is a simulator of profile (nil: the default one) in a
// cluster whose API holds objects (the DRA objects simulations read).
func newSimulator(t testing.TB, profile *config.KubeSchedulerProfile, objects ...runtime.Object) *Simulator {
	t.Helper()
	return newSimulatorWith(t, profile, nil, objects...)
}

// newSimulatorWith is newSimulator with options.
func newSimulatorWith(t testing.TB, profile *config.KubeSchedulerProfile, opts []Option, objects ...runtime.Object) *Simulator {
	t.Helper()
	if profile == nil {
		cfg, err := latest.Default()
		if err != nil {
			t.Fatal(err)
		}
		profile = &cfg.Profiles[0]
	}
	client := fake.NewClientset(objects...)
	s, err := New(t.Context(), profile, client, informers.NewSharedInformerFactory(client, 0), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func node(name, cpu string) *v1.Node {
	return st.MakeNode().Name(name).Capacity(map[v1.ResourceName]string{v1.ResourceCPU: cpu, v1.ResourceMemory: "16Gi", v1.ResourcePods: "110"}).Obj()
}

func pod(cpu string) *v1.Pod {
	return wrappers.MakePod("tmpl", "ns").Requests("cpu", cpu).Obj()
}

func bound(name, node, cpu string) *v1.Pod {
	return wrappers.MakePod(name, "ns").UID(name).NodeName(node).Requests("cpu", cpu).Obj()
}

func TestPlace(t *testing.T) {
	s := newSimulator(t, nil)
	ctx := context.Background()
	cluster := Cluster{
		Nodes: []*v1.Node{node("n1", "4"), node("n2", "4"), st.MakeNode().Name("n3").Label("zone", "b").
			Capacity(map[v1.ResourceName]string{v1.ResourceCPU: "4", v1.ResourcePods: "110"}).Obj()},
		Pods: []*v1.Pod{bound("busy", "n1", "3")},
	}
	// n1 has 1 CPU left, n2 and n3 4 each: nine 1-CPU pods fit, ten do not.
	got, err := s.Place(ctx, cluster, []PodSet{{Name: "workers", Pod: pod("1"), Count: 9}})
	if err != nil {
		t.Fatal(err)
	}
	want := "n1 n2 n2 n2 n2 n3 n3 n3 n3"
	if strings.Join(got["workers"], " ") != want {
		t.Errorf("placement %v, want %s", got["workers"], want)
	}
	_, err = s.Place(ctx, cluster, []PodSet{{Name: "workers", Pod: pod("1"), Count: 10}})
	var u *Unschedulable
	if !errors.As(err, &u) || u.Placed != 9 || !strings.Contains(u.Reason, "0/3 nodes are available: 3 Insufficient cpu") {
		t.Fatalf("ten pods: %v, want 9 placed and the scheduler's reason", err)
	}
	// Two sets share the cluster: the second sees the first's pods.
	_, err = s.Place(ctx, cluster, []PodSet{{Name: "a", Pod: pod("2"), Count: 4}, {Name: "b", Pod: pod("1"), Count: 2}})
	if !errors.As(err, &u) || u.PodSet != "b" || u.Placed != 1 {
		t.Fatalf("two sets: %v, want set b to fit one pod", err)
	}
	// The node selector is the filters' business too.
	zoned := pod("1")
	zoned.Spec.NodeSelector = map[string]string{"zone": "b"}
	got, err = s.Place(ctx, cluster, []PodSet{{Name: "zoned", Pod: zoned, Count: 4}})
	if err != nil || strings.Join(got["zoned"], " ") != "n3 n3 n3 n3" {
		t.Fatalf("zoned: %v %v", got, err)
	}
	_, err = s.Place(ctx, cluster, []PodSet{{Name: "zoned", Pod: zoned, Count: 5}})
	if !errors.As(err, &u) || !strings.Contains(u.Reason, "2 node(s) didn't match Pod's node affinity/selector") {
		t.Fatalf("zoned, five: %v", err)
	}
	// A simulation never changes the cluster it started from.
	if _, err := s.Place(ctx, cluster, []PodSet{{Name: "again", Pod: pod("1"), Count: 9}}); err != nil {
		t.Errorf("the same nine pods no longer fit: %v", err)
	}
}

// Anti-affinity between the request's own pods: one per node.
func TestPlaceSpreadsAntiAffinePods(t *testing.T) {
	s := newSimulator(t, nil)
	p := wrappers.MakePod("tmpl", "ns").Label("app", "db").Requests("cpu", "1").AntiAffinityExists("app", v1.LabelHostname).Obj()
	var nodes []*v1.Node
	for i := range 3 {
		nodes = append(nodes, st.MakeNode().Name(fmt.Sprintf("n%d", i)).Label(v1.LabelHostname, fmt.Sprintf("n%d", i)).
			Capacity(map[v1.ResourceName]string{v1.ResourceCPU: "8", v1.ResourcePods: "110"}).Obj())
	}
	got, err := s.Place(context.Background(), Cluster{Nodes: nodes}, []PodSet{{Name: "db", Pod: p, Count: 3}})
	if err != nil || strings.Join(got["db"], " ") != "n0 n1 n2" {
		t.Fatalf("placement %v, %v; want one pod per node", got, err)
	}
	if _, err := s.Place(context.Background(), Cluster{Nodes: nodes}, []PodSet{{Name: "db", Pod: p, Count: 4}}); err == nil {
		t.Error("four anti-affine pods fit on three nodes")
	}
}

// BenchmarkCheckCapacity1000PodsOn5000Nodes is check-capacity's decision
// for one request of 1000 one-CPU pods on 5000 nodes of 8 CPUs that run
// ten 700m pods each (one CPU free per node, so the request spreads over
// 1000 nodes): snapshot and simulation, as the provisioner runs them.
// Target: under 2s per decision.
func BenchmarkCheckCapacity1000PodsOn5000Nodes(b *testing.B) {
	s := newSimulator(b, nil)
	var c Cluster
	for n := range 5000 {
		name := fmt.Sprintf("node-%04d", n)
		c.Nodes = append(c.Nodes, node(name, "8"))
		for i := range 10 {
			c.Pods = append(c.Pods, bound(fmt.Sprintf("p-%d-%d", n, i), name, "700m"))
		}
	}
	sets := []PodSet{{Name: "workers", Pod: pod("1"), Count: 1000}}
	b.ResetTimer()
	for range b.N {
		got, err := s.Place(context.Background(), c, sets)
		if err != nil || len(got["workers"]) != 1000 {
			b.Fatalf("%v", err)
		}
	}
}

func TestPlaceUsesNewNodesLast(t *testing.T) {
	s := newSimulator(t, nil)
	// "a-new" sorts before "n1" by name, yet existing room comes first and
	// new nodes are used in the order given.
	cluster := Cluster{
		Nodes:    []*v1.Node{node("n1", "2")},
		NewNodes: []*v1.Node{node("z-new", "2"), node("a-new", "2"), node("m-new", "2")},
	}
	got, err := s.Place(context.Background(), cluster, []PodSet{{Name: "w", Pod: pod("1"), Count: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "n1 n1 z-new z-new a-new"; strings.Join(got["w"], " ") != want {
		t.Errorf("placement %v, want %s", got["w"], want)
	}
}
