package clusterapi

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups/clusterapi/capitest"
)

const good = `
nodeGroups:
- name: workers
  namespace: capi
  machineDeployment: cluster-a-workers
  minSize: 1
  maxSize: 5
  templateNode:
    labels: {pool: general, kubernetes.io/arch: arm64}
    taints: [{key: dedicated, value: batch, effect: NoSchedule}]
    capacity: {cpu: "4", memory: 16Gi, pods: "110", example.com/gpu: "1"}
- name: annotated
  namespace: capi
  machineDeployment: cluster-a-gpus
  templateNode:
    capacity: {cpu: "8", memory: 32Gi, pods: "110"}
`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NodeGroups) != 2 || *c.NodeGroups[0].MaxSize != 5 || c.NodeGroups[1].MinSize != nil ||
		c.NodeGroups[0].TemplateNode.Capacity.Cpu().String() != "4" {
		t.Errorf("parsed %+v", c)
	}
	const capacity = "capacity: {cpu: 1, memory: 1Gi, pods: 1}"
	group := func(fields string) string {
		return "nodeGroups: [{name: a, namespace: ns, machineDeployment: md, maxSize: 1, " + fields + "}]"
	}
	for _, tc := range []struct{ yaml, want string }{
		{"nodeGroups: [{name: Bad_Name, namespace: ns, machineDeployment: md, templateNode: {" + capacity + "}}]", `nodeGroups[0].name "Bad_Name"`},
		{"nodeGroups: [{name: a, machineDeployment: md, templateNode: {" + capacity + "}}]", `nodeGroups[0].namespace ""`},
		{"nodeGroups: [{name: a, namespace: ns, machineDeployment: MD, templateNode: {" + capacity + "}}]", `nodeGroups[0].machineDeployment "MD"`},
		{group("minSize: 2, templateNode: {" + capacity + "}"), "minSize 2 is above maxSize 1"},
		{"nodeGroups: [{name: a, namespace: ns, machineDeployment: md, minSize: -1, templateNode: {" + capacity + "}}]", "minSize must be between 0 and 10000"},
		{"nodeGroups: [{name: a, namespace: ns, machineDeployment: md, maxSize: 20000, templateNode: {" + capacity + "}}]", "maxSize must be between 0 and 10000"},
		{group("templateNode: {capacity: {cpu: 1, pods: 1}}"), "nodeGroups[0].templateNode.capacity.memory must be positive"},
		{group("templateNode: {capacity: {cpu: 1, memory: 1Gi, pods: 1, example.com/x: -1}}"), "capacity.example.com/x must not be negative"},
		{group("templateNode: {labels: {autoscaling.gantry.dev/node-group: x}, " + capacity + "}"), "is set by the provider"},
		{group("templateNode: {labels: {kubernetes.io/hostname: x}, " + capacity + "}"), "kubernetes.io/hostname is set by the provider"},
		{group("templateNode: {labels: {a: 'b c'}, " + capacity + "}"), "labels[a]: value"},
		{group("templateNode: {taints: [{key: k, effect: Sometimes}], " + capacity + "}"), `taints[0].effect "Sometimes"`},
		{group("templateNode: {taints: [{key: k, effect: NoSchedule}, {key: k, value: v, effect: NoSchedule}], " + capacity + "}"), "taints[1]: duplicate"},
		{"nodeGroups: [{name: a, namespace: ns, machineDeployment: md, templateNode: {" + capacity + "}}, {name: a, namespace: ns, machineDeployment: md2, templateNode: {" + capacity + "}}]", `"a": duplicate`},
		{"nodeGroups: [{name: a, namespace: ns, machineDeployment: md, templateNode: {" + capacity + "}}, {name: b, namespace: ns, machineDeployment: md, templateNode: {" + capacity + "}}]", `MachineDeployment ns/md is already node group "a"`},
		{group("cpu: 4, templateNode: {" + capacity + "}"), "unknown field"},
	} {
		if _, err := ParseConfig([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
	// Every problem is reported, not only the first.
	_, err = ParseConfig([]byte("nodeGroups: [{name: A, namespace: B, machineDeployment: C, templateNode: {}}]"))
	if err == nil || strings.Count(err.Error(), "\n") < 5 {
		t.Errorf("want name, namespace, machineDeployment and three capacity errors, got %v", err)
	}
}

func TestTemplateNode(t *testing.T) {
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), &Config{NodeGroups: c.NodeGroups[:1]}, capitest.NewFakeDynamicClient(), fake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	n := p.NodeGroups()[0].TemplateNode()
	want := map[string]string{
		nodegroups.LabelNodeGroup: "workers",
		"kubernetes.io/hostname":  "workers-template",
		"kubernetes.io/os":        "linux",
		"kubernetes.io/arch":      "arm64", // the configuration overrides amd64
		"pool":                    "general",
	}
	for k, v := range want {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if len(n.Spec.Taints) != 1 || n.Status.Allocatable.Cpu().String() != "4" || n.Status.Capacity.Memory().String() != "16Gi" ||
		n.Status.Allocatable.Name("example.com/gpu", "").String() != "1" {
		t.Errorf("template node %+v", n)
	}
	// The template is a copy.
	n.Status.Capacity["cpu"] = n.Status.Capacity["pods"]
	if p.NodeGroups()[0].TemplateNode().Status.Capacity.Cpu().String() != "4" {
		t.Error("changing a template node changed the group's")
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(good)
	f.Add("nodeGroups: [{name: a, namespace: b, machineDeployment: c, maxSize: 1}]")
	f.Add("nodeGroups: [{name: a, namespace: b, machineDeployment: c, minSize: 0, maxSize: 3, templateNode: {capacity: {cpu: 1, memory: 1, pods: 1}}}]")
	f.Add(`{"nodeGroups": [{"name": "a", "namespace": "b", "machineDeployment": "c", "templateNode": {"taints": [{"key": "k", "effect": "NoExecute"}], "capacity": {"cpu": "1m", "memory": "1", "pods": "1"}}}]}`)
	f.Fuzz(func(t *testing.T, data string) {
		c, err := ParseConfig([]byte(data))
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a configuration Validate rejects: %v", err)
		}
		// Whatever parses is a usable provider: one whose groups all have
		// configured bounds is built without reading a MachineDeployment;
		// one that needs an annotation fails to build, as none exists.
		needsDeployment := false
		for _, g := range c.NodeGroups {
			needsDeployment = needsDeployment || g.MinSize == nil || g.MaxSize == nil
		}
		p, err := New(context.Background(), c, capitest.NewFakeDynamicClient(), fake.NewClientset())
		if needsDeployment != (err != nil) {
			t.Fatalf("a group reads its MachineDeployment: %v; New: %v", needsDeployment, err)
		}
		if err != nil {
			return
		}
		for _, g := range p.NodeGroups() {
			n := g.TemplateNode()
			if g.MaxSize() < g.MinSize() || g.MinSize() < 0 || n.Status.Allocatable.Cpu().Sign() <= 0 ||
				n.Labels[nodegroups.LabelNodeGroup] != g.ID() {
				t.Fatalf("accepted group %s with sizes %d..%d and template %+v", g.ID(), g.MinSize(), g.MaxSize(), n)
			}
		}
	})
}
