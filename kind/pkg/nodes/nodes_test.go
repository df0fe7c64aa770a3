package nodes

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups/kwok"
)

func TestTopologyCoversEveryZoneAndInstanceType(t *testing.T) {
	got := map[string]int{}
	for _, n := range Topology(9) {
		got[n.Labels[v1.LabelTopologyZone]+"/"+n.Labels[v1.LabelInstanceTypeStable]]++
	}
	want := map[string]int{}
	for _, z := range Zones {
		for _, it := range InstanceTypes {
			want[z+"/"+it.Name] = 1
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("zone/instance-type pairs of 9 nodes (-want +got):\n%s", diff)
	}
}

func TestTopologyNodeShape(t *testing.T) {
	n := Topology(5)[4] // zone-b, second instance type
	if n.Name != "kwok-node-4" {
		t.Errorf("name = %q", n.Name)
	}
	for k, v := range map[string]string{
		v1.LabelTopologyZone:       "zone-b",
		v1.LabelInstanceTypeStable: InstanceTypes[1].Name,
		v1.LabelHostname:           "kwok-node-4",
		ManagedLabel:               "true",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Annotations[kwok.KwokAnnotation] != "fake" {
		t.Errorf("node is not handed to kwok: annotations %v", n.Annotations)
	}
	cpu := n.Status.Allocatable[v1.ResourceCPU]
	if cpu.String() != InstanceTypes[1].CPU {
		t.Errorf("allocatable cpu = %s, want %s", cpu.String(), InstanceTypes[1].CPU)
	}
	if pods := n.Status.Capacity[v1.ResourcePods]; pods.Value() != PodsPerNode {
		t.Errorf("pod capacity = %d", pods.Value())
	}
}

func TestEnsureCreatesOnlyMissingNodes(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(Topology(2)[1])
	created, err := Ensure(ctx, client, Topology(4))
	if err != nil {
		t.Fatal(err)
	}
	if created != 3 {
		t.Errorf("created %d nodes, want 3 (one already existed)", created)
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 4 {
		t.Errorf("cluster has %d nodes, want 4", len(list.Items))
	}
	again, err := Ensure(ctx, client, Topology(4))
	if err != nil || again != 0 {
		t.Errorf("second Ensure created %d nodes (err %v), want 0", again, err)
	}
}

func TestIsReady(t *testing.T) {
	for _, tc := range []struct {
		conds []v1.NodeCondition
		want  bool
	}{
		{nil, false},
		{[]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}}, false},
		{[]v1.NodeCondition{{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue}}, false},
		{[]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}, true},
	} {
		t.Run(fmt.Sprint(tc.conds), func(t *testing.T) {
			if got := IsReady(&v1.Node{Status: v1.NodeStatus{Conditions: tc.conds}}); got != tc.want {
				t.Errorf("IsReady = %v, want %v", got, tc.want)
			}
		})
	}
}
