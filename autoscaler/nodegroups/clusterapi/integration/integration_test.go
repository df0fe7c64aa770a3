//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups/clusterapi"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups/clusterapi/capitest"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
)

const namespace = "capi"

// config: workers sized by the configuration, others by its
// MachineDeployment's annotations.
const config = `
nodeGroups:
- name: workers
  namespace: capi
  machineDeployment: workers
  minSize: 2
  maxSize: 5
  templateNode: {capacity: {cpu: "1", memory: 1Gi, pods: "10"}}
- name: others
  namespace: capi
  machineDeployment: others
  templateNode: {capacity: {cpu: "1", memory: 1Gi, pods: "10"}}
`

// TestProvider scales MachineDeployments up, rolls an attempt back and
// removes nodes, with capitest's machine controller playing Cluster API.
func TestProvider(t *testing.T) {
	cp := framework.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	kube := cp.Client
	cp.InstallCRDs(t, capitest.CRDs()...)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mds := dyn.Resource(clusterapi.MachineDeploymentResource).Namespace(namespace)
	for _, md := range []*unstructured.Unstructured{
		capitest.NewMachineDeployment(namespace, "workers", 0, nil),
		capitest.NewMachineDeployment(namespace, "others", 0, map[string]string{clusterapi.AnnotationMinSize: "0", clusterapi.AnnotationMaxSize: "2"}),
	} {
		if _, err := mds.Create(ctx, md, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := clusterapi.ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	p, err := clusterapi.New(ctx, c, dyn, kube)
	if err != nil {
		t.Fatal(err)
	}
	workers, others := p.Group("workers"), p.Group("others")
	if others.MinSize() != 0 || others.MaxSize() != 2 {
		t.Errorf("others sized %d..%d from its annotations, want 0..2", others.MinSize(), others.MaxSize())
	}

	ctl := capitest.NewMachineController(dyn, kube, namespace)
	ctlCtx, stopCtl := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ctl.Run(ctlCtx, util.Interval, t.Logf)
	}()
	t.Cleanup(func() { stopCtl(); <-stopped })

	// waitAttempt waits until an attempt has the machines and nodes wanted.
	waitAttempt := func(g *clusterapi.Group, attempt string, machines, nodes int) clusterapi.AttemptStatus {
		t.Helper()
		var s clusterapi.AttemptStatus
		util.Must(t).Poll(ctx, util.LongTimeout, fmt.Sprintf("attempt %s of group %s with %d machines and %d nodes", attempt, g.ID(), machines, nodes),
			func(ctx context.Context) (bool, error) {
				var err error
				if s, err = g.Attempt(ctx, attempt); err != nil {
					t.Logf("attempt %s: %v", attempt, err)
					return false, err
				}
				return len(s.Machines) == machines && len(s.Nodes) == nodes && s.Waiting == 0, fmt.Errorf("%+v", s)
			})
		return s
	}
	machineNames := func(md string) []string {
		t.Helper()
		list, err := dyn.Resource(clusterapi.MachineResource).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: clusterapi.LabelDeploymentName + "=" + md})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range list.Items {
			out = append(out, m.GetName())
		}
		slices.Sort(out)
		return out
	}
	waitMachines := func(md string, want []string) {
		t.Helper()
		util.Must(t).Poll(ctx, util.LongTimeout, fmt.Sprintf("machines of %s %v", md, want), func(ctx context.Context) (bool, error) {
			got := machineNames(md)
			return slices.Equal(got, want), fmt.Errorf("machines %v", got)
		})
	}
	targetSize := func(g *clusterapi.Group, want int) {
		t.Helper()
		if n, err := g.TargetSize(ctx); err != nil || n != want {
			t.Fatalf("group %s: TargetSize = %d, %v, want %d", g.ID(), n, err, want)
		}
	}

	// Attempt a: three machines and three nodes, labelled.
	start := time.Now()
	names, err := workers.IncreaseSize(ctx, 3, "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("IncreaseSize(3, a) returned nodes %v", names)
	// As the provisioner waits: Refresh, then the nodes by their label.
	var labelled []string
	util.Must(t).Poll(ctx, util.LongTimeout, "3 nodes labelled with attempt a", func(ctx context.Context) (bool, error) {
		if err := p.Refresh(ctx); err != nil {
			t.Logf("Refresh: %v", err)
			return false, err
		}
		list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelAttempt + "=a"})
		if err != nil {
			return false, err
		}
		labelled = nil
		for _, n := range list.Items {
			labelled = append(labelled, n.Name)
		}
		slices.Sort(labelled)
		return len(labelled) == 3, fmt.Errorf("nodes %v", labelled)
	})
	t.Logf("attempt a: nodes %v labelled after %v", labelled, time.Since(start).Round(time.Millisecond))
	a := waitAttempt(workers, "a", 3, 3)
	if !slices.Equal(a.Nodes, labelled) {
		t.Errorf("attempt a: nodes %v, labelled %v", a.Nodes, labelled)
	}
	t.Logf("attempt a: machines %v, nodes %v", a.Machines, a.Nodes)
	for _, name := range a.Nodes {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels[nodegroups.LabelAttempt] != "a" || n.Labels[nodegroups.LabelNodeGroup] != "workers" {
			t.Errorf("node %s labelled %v", name, n.Labels)
		}
		if g, ok := p.NodeGroupForNode(n); !ok || g.ID() != "workers" {
			t.Errorf("NodeGroupForNode(%s) = %v, %v", name, g, ok)
		}
	}
	targetSize(workers, 3)
	if again, err := workers.IncreaseSize(ctx, 3, "a"); err != nil || !slices.Equal(again, a.Nodes) {
		t.Errorf("retried attempt a: %v, %v, want %v", again, err, a.Nodes)
	}
	targetSize(workers, 3)

	// Beyond the maximum: refused, nothing written.
	before, err := mds.Get(ctx, "workers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workers.IncreaseSize(ctx, 3, "x"); err == nil || !strings.Contains(err.Error(), "exceed its maximum of 5") {
		t.Errorf("3 and 3 more in a group of at most 5: %v", err)
	}
	after, err := mds.Get(ctx, "workers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("a refused scale-up wrote the MachineDeployment: %v", after.GetAnnotations())
	}
	if s, _ := workers.Attempt(ctx, "x"); s.Known {
		t.Errorf("the refused attempt is recorded: %+v", s)
	}

	// Attempt b: two machines, one never gets a node; rolled back.
	ctl.SkipNodes("workers", 1)
	if _, err := workers.IncreaseSize(ctx, 2, "b"); err != nil {
		t.Fatal(err)
	}
	b := waitAttempt(workers, "b", 2, 1)
	t.Logf("attempt b: machines %v, nodes %v", b.Machines, b.Nodes)
	targetSize(workers, 5)
	if err := workers.RollBack(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	targetSize(workers, 3)
	waitMachines("workers", a.Machines)
	if s, err := workers.Attempt(ctx, "b"); err != nil || !s.RolledBack || len(s.Machines) != 0 {
		t.Errorf("attempt b after the rollback: %+v, %v", s, err)
	}
	if s := waitAttempt(workers, "a", 3, 3); !slices.Equal(s.Nodes, a.Nodes) {
		t.Errorf("attempt a after b's rollback: %+v", s)
	}
	nodes, err := workers.Nodes(ctx)
	if err != nil || len(nodes) != 3 {
		t.Errorf("Nodes after the rollback: %v, %v", nodes, err)
	}
	for _, name := range b.Nodes {
		if _, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Errorf("node %s of the rolled-back attempt is left", name)
		}
	}

	// A node of another group is refused.
	if _, err := others.IncreaseSize(ctx, 1, "o"); err != nil {
		t.Fatal(err)
	}
	o := waitAttempt(others, "o", 1, 1)
	on, err := kube.CoreV1().Nodes().Get(ctx, o.Nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := p.NodeGroupForNode(on); !ok || g.ID() != "others" {
		t.Errorf("NodeGroupForNode(%s) = %v, %v", on.Name, g, ok)
	}
	if err := workers.DeleteNodes(ctx, []string{o.Nodes[0]}); err == nil || !strings.Contains(err.Error(), "is not of a machine of node group workers") {
		t.Errorf("workers deleting a node of others: %v", err)
	}
	targetSize(others, 1)
	targetSize(workers, 3)

	// Deleting a node of the group, down to the minimum and not beyond.
	if err := workers.DeleteNodes(ctx, []string{a.Nodes[0]}); err != nil {
		t.Fatal(err)
	}
	targetSize(workers, 2)
	// The test controller names a node as its machine.
	waitMachines("workers", slices.DeleteFunc(slices.Clone(a.Machines), func(m string) bool { return m == a.Nodes[0] }))
	if err := workers.DeleteNodes(ctx, []string{a.Nodes[1]}); err == nil || !strings.Contains(err.Error(), "fewer than its minimum of 2") {
		t.Errorf("deleting below the minimum: %v", err)
	}
	targetSize(workers, 2)
	if err := p.Refresh(ctx); err != nil {
		t.Errorf("Refresh: %v", err)
	}
}
