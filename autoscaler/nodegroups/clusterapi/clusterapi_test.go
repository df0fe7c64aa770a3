package clusterapi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups/clusterapi/capitest"
)

const testNamespace = "capi"

// newDeployment is a MachineDeployment of testNamespace with replicas and
// annotations.
func newDeployment(name string, replicas int64, annotations map[string]string) *unstructured.Unstructured {
	return capitest.NewMachineDeployment(testNamespace, name, replicas, annotations)
}

func intp(n int) *int { return &n }

// groupConfig is a group of MachineDeployment md with the given bounds.
func groupConfig(name, md string, minSize, maxSize *int) GroupConfig {
	c, err := ParseConfig([]byte(`nodeGroups: [{name: x, namespace: x, machineDeployment: x, templateNode: {capacity: {cpu: 1, memory: 1Gi, pods: 10}}}]`))
	if err != nil {
		panic(err)
	}
	g := c.NodeGroups[0]
	g.Name, g.Namespace, g.MachineDeployment, g.MinSize, g.MaxSize = name, testNamespace, md, minSize, maxSize
	return g
}

// fakeEnv is a provider on fake clients with a test machine controller.
type fakeEnv struct {
	t    *testing.T
	dyn  *dynamicfake.FakeDynamicClient
	kube kubernetes.Interface
	ctl  *capitest.MachineController
	p    *Provider
}

func newFakeEnv(t *testing.T, groups []GroupConfig, objects ...runtime.Object) *fakeEnv {
	t.Helper()
	e := &fakeEnv{t: t, dyn: capitest.NewFakeDynamicClient(objects...), kube: fake.NewClientset()}
	e.ctl = capitest.NewMachineController(e.dyn, e.kube, testNamespace)
	p, err := New(context.Background(), &Config{NodeGroups: groups}, e.dyn, e.kube)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	return e
}

// step runs the machine controller once.
func (e *fakeEnv) step() {
	e.t.Helper()
	if err := e.ctl.Step(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *fakeEnv) deployment(name string) (replicas int64, st state) {
	e.t.Helper()
	md, err := e.dyn.Resource(MachineDeploymentResource).Namespace(testNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	replicas, _, _ = unstructured.NestedInt64(md.Object, "spec", "replicas")
	if s := md.GetAnnotations()[AnnotationState]; s != "" {
		if err := json.Unmarshal([]byte(s), &st); err != nil {
			e.t.Fatal(err)
		}
	}
	return replicas, st
}

// machines lists a MachineDeployment's machines by name.
func (e *fakeEnv) machines(md string) map[string]*unstructured.Unstructured {
	e.t.Helper()
	list, err := e.dyn.Resource(MachineResource).Namespace(testNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: LabelDeploymentName + "=" + md})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		out[list.Items[i].GetName()] = &list.Items[i]
	}
	return out
}

func (e *fakeEnv) node(name string) *v1.Node {
	e.t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func TestSizesFromAnnotations(t *testing.T) {
	ctx := context.Background()
	sized := newDeployment("sized", 2, map[string]string{AnnotationMinSize: "1", AnnotationMaxSize: "4"})
	e := newFakeEnv(t, []GroupConfig{
		groupConfig("from-annotations", "sized", nil, nil),
		groupConfig("config-wins", "sized-too", nil, intp(7)),
	}, sized, newDeployment("sized-too", 0, map[string]string{AnnotationMinSize: "1", AnnotationMaxSize: "4"}))
	a, b := e.p.Group("from-annotations"), e.p.Group("config-wins")
	if a.MinSize() != 1 || a.MaxSize() != 4 || b.MinSize() != 1 || b.MaxSize() != 7 {
		t.Errorf("sizes %d..%d and %d..%d, want 1..4 and 1..7", a.MinSize(), a.MaxSize(), b.MinSize(), b.MaxSize())
	}
	if n, err := a.TargetSize(ctx); err != nil || n != 2 {
		t.Errorf("TargetSize = %d, %v, want spec.replicas 2", n, err)
	}
	// A changed annotation is read again.
	sized.SetAnnotations(map[string]string{AnnotationMinSize: "0", AnnotationMaxSize: "9"})
	if _, err := e.dyn.Resource(MachineDeploymentResource).Namespace(testNamespace).Update(ctx, sized, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TargetSize(ctx); err != nil || a.MinSize() != 0 || a.MaxSize() != 9 {
		t.Errorf("after the annotations changed: %d..%d, %v", a.MinSize(), a.MaxSize(), err)
	}

	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{nil, "the annotation " + AnnotationMinSize + " is missing"},
		{map[string]string{AnnotationMinSize: "1", AnnotationMaxSize: "many"}, `annotation ` + AnnotationMaxSize + `="many" is not an integer`},
		{map[string]string{AnnotationMinSize: "3", AnnotationMaxSize: "2"}, "minimum size 3 is above maximum size 2"},
	} {
		_, err := New(ctx, &Config{NodeGroups: []GroupConfig{groupConfig("g", "md", nil, nil)}}, capitest.NewFakeDynamicClient(newDeployment("md", 0, tc.annotations)), fake.NewClientset())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("annotations %v: error %v, want %q", tc.annotations, err, tc.want)
		}
	}
	if _, err := New(ctx, &Config{NodeGroups: []GroupConfig{groupConfig("g", "absent", nil, nil)}}, capitest.NewFakeDynamicClient(), fake.NewClientset()); !apierrors.IsNotFound(err) {
		t.Errorf("a missing MachineDeployment: %v", err)
	}
}

func TestScaleUpSyncRollBack(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t, []GroupConfig{groupConfig("workers", "md", intp(1), intp(4))}, newDeployment("md", 1, nil))
	g := e.p.Group("workers")
	e.step() // the first machine and its node, which predate the provider
	var old string
	for name := range e.machines("md") {
		old = name
	}

	if _, err := g.IncreaseSize(ctx, 4, "a1"); err == nil || !strings.Contains(err.Error(), "1 nodes and 4 more exceed its maximum of 4") {
		t.Fatalf("5 nodes in a group of at most 4: %v", err)
	}
	if replicas, st := e.deployment("md"); replicas != 1 || len(st.Pending) != 0 {
		t.Fatalf("a refused scale-up left replicas %d and state %+v", replicas, st)
	}
	names, err := g.IncreaseSize(ctx, 2, "a1")
	if err != nil || len(names) != 0 {
		t.Fatalf("scale-up: %v, %v (want no nodes yet)", names, err)
	}
	replicas, st := e.deployment("md")
	if replicas != 3 || len(st.Pending) != 1 || st.Pending[0].ID != "a1" || st.Pending[0].Delta != 2 || !slices.Equal(st.Pending[0].Before, []string{old}) {
		t.Fatalf("after the scale-up: replicas %d, state %+v", replicas, st)
	}

	e.ctl.SkipNodes("md", 1) // the first new machine gets no node
	e.step()
	// What the provisioner does: Refresh, then look for the attempt's
	// nodes by their label.
	if err := e.p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	byLabel, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelAttempt + "=a1"})
	if err != nil || len(byLabel.Items) != 1 {
		t.Fatalf("nodes labelled with attempt a1 after Refresh: %v, %v, want 1", byLabel, err)
	}
	s, err := g.Attempt(ctx, "a1")
	if err != nil || len(s.Machines) != 2 || !slices.Equal(s.Nodes, []string{byLabel.Items[0].Name}) || s.Waiting != 0 || s.RolledBack {
		t.Fatalf("attempt a1: %+v, %v", s, err)
	}
	n := e.node(s.Nodes[0])
	if n.Labels[nodegroups.LabelAttempt] != "a1" || n.Labels[nodegroups.LabelNodeGroup] != "workers" {
		t.Errorf("node of the attempt labelled %v", n.Labels)
	}
	if l := e.node(old).Labels; l[nodegroups.LabelNodeGroup] != "workers" || l[nodegroups.LabelAttempt] != "" {
		t.Errorf("node of the older machine labelled %v", l)
	}
	for _, m := range s.Machines {
		if l := e.machines("md")[m].GetLabels(); l[nodegroups.LabelAttempt] != "a1" || l[nodegroups.LabelNodeGroup] != "workers" {
			t.Errorf("machine %s labelled %v", m, l)
		}
	}
	if _, st := e.deployment("md"); len(st.Pending) != 0 || len(st.Finished) != 1 || st.Finished[0].ID != "a1" {
		t.Errorf("a finished attempt left state %+v", st)
	}
	nodes, err := g.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Errorf("Nodes = %v, %v, want the older node and the attempt's", nodes, err)
	}

	// Retried: nothing twice.
	if again, err := g.IncreaseSize(ctx, 2, "a1"); err != nil || !slices.Equal(again, s.Nodes) {
		t.Errorf("retried attempt: %v, %v, want %v", again, err, s.Nodes)
	}
	if _, err := g.IncreaseSize(ctx, 1, "a1"); err != nil {
		t.Errorf("a retry of a finished attempt: %v", err)
	}
	if replicas, _ := e.deployment("md"); replicas != 3 {
		t.Errorf("retries changed replicas to %d", replicas)
	}

	if err := g.RollBack(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	replicas, st = e.deployment("md")
	if replicas != 1 || len(st.Deleting) != 2 || len(st.Finished) != 1 || !st.Finished[0].RolledBack {
		t.Fatalf("after the rollback: replicas %d, state %+v", replicas, st)
	}
	for _, m := range s.Machines {
		if _, ok := e.machines("md")[m].GetAnnotations()[AnnotationDeleteMachine]; !ok {
			t.Errorf("machine %s not marked for deletion", m)
		}
	}
	if err := g.RollBack(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if replicas, _ := e.deployment("md"); replicas != 1 {
		t.Errorf("a second rollback changed replicas to %d", replicas)
	}
	if _, err := g.IncreaseSize(ctx, 1, "a2"); err == nil || !strings.Contains(err.Error(), "2 machines are being removed") {
		t.Errorf("a scale-up while machines are removed: %v", err)
	}
	e.step()
	if ms := e.machines("md"); len(ms) != 1 || ms[old] == nil {
		t.Errorf("machines left: %v, want %s", ms, old)
	}
	if _, err := e.kube.CoreV1().Nodes().Get(ctx, s.Nodes[0], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the rolled-back node: %v", err)
	}
	if _, err := g.IncreaseSize(ctx, 2, "a1"); err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Errorf("reusing a rolled-back attempt: %v", err)
	}
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, st := e.deployment("md"); len(st.Deleting) != 0 {
		t.Errorf("deleted machines still in the state: %+v", st)
	}
	if err := g.RollBack(ctx, "never-tried"); err != nil {
		t.Errorf("rolling back an unknown attempt: %v", err)
	}
}

func TestInterleavedAttempts(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t, []GroupConfig{groupConfig("workers", "md", intp(0), intp(10))}, newDeployment("md", 0, nil))
	g := e.p.Group("workers")
	if _, err := g.IncreaseSize(ctx, 2, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.IncreaseSize(ctx, 1, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.IncreaseSize(ctx, 3, "c"); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteNodes(ctx, []string{"none-yet"}); err != nil {
		t.Errorf("deleting a node that does not exist: %v", err)
	}
	e.step()
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The machines are handed out oldest first: two to a, one to b, three
	// to c.
	var byAge []string
	for _, m := range e.machines("md") {
		byAge = append(byAge, fmt.Sprintf("%s=%s", m.GetCreationTimestamp().UTC().Format("15:04:05"), m.GetLabels()[nodegroups.LabelAttempt]))
	}
	slices.Sort(byAge)
	var got []string
	for _, s := range byAge {
		got = append(got, s[strings.Index(s, "=")+1:])
	}
	if strings.Join(got, " ") != "a a b c c c" {
		t.Errorf("attempts by machine age: %v", byAge)
	}
	if _, st := e.deployment("md"); len(st.Pending) != 0 || len(st.Finished) != 3 {
		t.Errorf("state %+v", st)
	}
}

func TestRollBackBeforeMachinesExist(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t, []GroupConfig{groupConfig("workers", "md", intp(0), intp(10))}, newDeployment("md", 2, nil))
	g := e.p.Group("workers")
	e.step()
	if _, err := g.IncreaseSize(ctx, 3, "a"); err != nil {
		t.Fatal(err)
	}
	// One machine of three made, then the rollback.
	if err := e.ctl.Scale(ctx, "md", 3); err != nil {
		t.Fatal(err)
	}
	if s, err := g.Attempt(ctx, "a"); err != nil || len(s.Machines) != 1 || s.Waiting != 2 {
		t.Fatalf("attempt a: %+v, %v", s, err)
	}
	if err := g.RollBack(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if replicas, st := e.deployment("md"); replicas != 2 || len(st.Pending) != 0 || len(st.Deleting) != 1 {
		t.Errorf("after the rollback: replicas %d, state %+v", replicas, st)
	}
	e.step()
	ms := e.machines("md")
	if len(ms) != 2 {
		t.Errorf("%d machines left, want the 2 older ones", len(ms))
	}
	for name, m := range ms {
		if m.GetLabels()[nodegroups.LabelAttempt] != "" {
			t.Errorf("machine %s of the attempt is left", name)
		}
	}
}

func TestDeleteNodes(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t, []GroupConfig{
		groupConfig("workers", "md", intp(1), intp(5)),
		groupConfig("others", "other", intp(0), intp(5)),
	}, newDeployment("md", 3, nil), newDeployment("other", 1, nil))
	g := e.p.Group("workers")
	e.step()
	nodes, err := g.Nodes(ctx)
	if err != nil || len(nodes) != 3 {
		t.Fatalf("Nodes = %v, %v", nodes, err)
	}
	// Oldest machine first (the test controller names a node as its
	// machine). The MachineSet controller removes the newest machines
	// unless some are marked: removing the older two checks the marks.
	ms := e.machines("md")
	slices.SortFunc(nodes, func(a, b *v1.Node) int {
		return ms[a.Name].GetCreationTimestamp().Time.Compare(ms[b.Name].GetCreationTimestamp().Time)
	})
	otherNodes, err := e.p.Group("others").Nodes(ctx)
	if err != nil || len(otherNodes) != 1 {
		t.Fatalf("Nodes of others = %v, %v", otherNodes, err)
	}
	if _, err := e.kube.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stray"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, foreign := range []string{otherNodes[0].Name, "stray"} {
		err := g.DeleteNodes(ctx, []string{nodes[0].Name, foreign})
		if err == nil || !strings.Contains(err.Error(), "node "+foreign+" is not of a machine of node group workers") {
			t.Errorf("deleting node %s: %v", foreign, err)
		}
	}
	if replicas, _ := e.deployment("md"); replicas != 3 {
		t.Errorf("refused deletions changed replicas to %d", replicas)
	}
	for name, m := range e.machines("md") {
		if _, ok := m.GetAnnotations()[AnnotationDeleteMachine]; ok {
			t.Errorf("a refused deletion marked machine %s", name)
		}
	}
	if err := g.DeleteNodes(ctx, []string{nodes[0].Name, nodes[1].Name, nodes[2].Name}); err == nil || !strings.Contains(err.Error(), "fewer than its minimum of 1") {
		t.Errorf("deleting every node: %v", err)
	}
	if err := g.DeleteNodes(ctx, []string{nodes[0].Name, nodes[1].Name, nodes[0].Name, "gone"}); err != nil {
		t.Fatal(err)
	}
	// Retried before the MachineSet controller acted: nothing twice.
	if err := g.DeleteNodes(ctx, []string{nodes[0].Name}); err != nil {
		t.Fatal(err)
	}
	if replicas, st := e.deployment("md"); replicas != 1 || len(st.Deleting) != 2 {
		t.Errorf("after deleting 2 of 3: replicas %d, state %+v", replicas, st)
	}
	e.step()
	left, err := g.Nodes(ctx)
	if err != nil || len(left) != 1 || left[0].Name != nodes[2].Name {
		t.Errorf("left %v, %v, want %s", left, err, nodes[2].Name)
	}

	// While the group grows, a deletion would only cancel a creation.
	if _, err := g.IncreaseSize(ctx, 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteNodes(ctx, []string{nodes[2].Name}); err == nil || !strings.Contains(err.Error(), "wait until the MachineSet controller has created") {
		t.Errorf("deleting while machines are created: %v", err)
	}
}

func TestConflictRetried(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t, []GroupConfig{groupConfig("workers", "md", intp(0), intp(5))}, newDeployment("md", 0, nil))
	conflicts := 2
	e.dyn.PrependReactor("update", "machinedeployments", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		// Someone else wrote the MachineDeployment meanwhile.
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "cluster.x-k8s.io", Resource: "machinedeployments"}, "md", fmt.Errorf("changed"))
	})
	if _, err := e.p.Group("workers").IncreaseSize(ctx, 2, "a"); err != nil {
		t.Fatal(err)
	}
	if replicas, st := e.deployment("md"); replicas != 2 || len(st.Pending) != 1 {
		t.Errorf("after two conflicts: replicas %d, state %+v", replicas, st)
	}
}

func TestStateOfAnotherGroup(t *testing.T) {
	md := newDeployment("md", 0, map[string]string{AnnotationState: `{"group":"someone-else"}`})
	e := newFakeEnv(t, []GroupConfig{groupConfig("workers", "md", intp(0), intp(5))}, md)
	if _, err := e.p.Group("workers").IncreaseSize(context.Background(), 1, "a"); err == nil || !strings.Contains(err.Error(), `managed by node group "someone-else"`) {
		t.Errorf("scaling a MachineDeployment of another group: %v", err)
	}
}

func TestNodeGroupForNode(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t, []GroupConfig{
		groupConfig("workers", "md", intp(0), intp(5)),
		groupConfig("others", "other", intp(0), intp(5)),
	}, newDeployment("md", 1, nil), newDeployment("other", 1, nil), newDeployment("unmanaged", 1, nil))
	e.step()
	// A fresh provider has listed no machine: it reads them.
	p, err := New(ctx, &Config{NodeGroups: []GroupConfig{groupConfig("workers", "md", intp(0), intp(5)), groupConfig("others", "other", intp(0), intp(5))}}, e.dyn, e.kube)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 3 {
		t.Fatalf("nodes %v, %v", nodes, err)
	}
	for _, provider := range []*Provider{p, e.p} {
		got := map[string]string{}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			g, ok := provider.NodeGroupForNode(n)
			if ok {
				got[n.Annotations[AnnotationMachine]] = g.ID()
			} else {
				got[n.Annotations[AnnotationMachine]] = "-"
			}
		}
		for machine, id := range got {
			want := map[string]string{"md": "workers", "other": "others", "unmanaged": "-"}[machine[:strings.LastIndex(machine, "-")]]
			if id != want {
				t.Errorf("node of machine %s: group %s, want %s", machine, id, want)
			}
		}
		// Machines are listed now (by Nodes), for the second round.
		for _, g := range e.p.groups {
			if _, err := g.Nodes(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A node without a machine: by its label; a machine that is gone: none.
	labelled := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "l", Labels: map[string]string{nodegroups.LabelNodeGroup: "others"}}}
	if g, ok := p.NodeGroupForNode(labelled); !ok || g.ID() != "others" {
		t.Errorf("labelled node: %v, %v", g, ok)
	}
	labelled.Annotations = map[string]string{AnnotationMachine: "gone", AnnotationClusterNamespace: testNamespace}
	if g, ok := p.NodeGroupForNode(labelled); ok {
		t.Errorf("node of a machine that is gone: %v", g.ID())
	}
}

// TestRolloutMachinesNotTheAttempts: machines that a new MachineSet
// creates while an attempt is pending (a rollout to a new template, made
// after the attempt began) are never labelled with the attempt, so its
// roll-back does not delete them; machines of the MachineSet the attempt
// knew are. Before, any new machine went to the oldest pending attempt.
func TestRolloutMachinesNotTheAttempts(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t, []GroupConfig{groupConfig("workers", "md", intp(0), intp(5))}, newDeployment("md", 1, nil),
		capitest.NewMachineSet(testNamespace, "md-old", "md"))
	g := e.p.Group("workers")
	e.ctl.CreateFrom("md", "md-old")
	e.step()
	if _, err := g.IncreaseSize(ctx, 1, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, st := e.deployment("md"); len(st.Pending) != 1 || !slices.Equal(st.Pending[0].MachineSets, []string{"md-old"}) {
		t.Fatalf("pending attempts %+v, want a1 knowing MachineSet md-old", st.Pending)
	}

	// A rollout: a new MachineSet surges one machine before the
	// attempt's comes.
	if _, err := e.dyn.Resource(MachineSetResource).Namespace(testNamespace).Create(ctx, capitest.NewMachineSet(testNamespace, "md-new", "md"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.ctl.CreateFrom("md", "md-new")
	if err := e.ctl.Scale(ctx, "md", 2); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := g.Attempt(ctx, "a1"); err != nil || len(s.Machines) != 0 || s.Waiting != 1 {
		t.Fatalf("attempt a1 after the rollout's machine came: %+v, %v; want no machine and one waited for", s, err)
	}
	// The attempt's machine, from the MachineSet it knew.
	e.ctl.CreateFrom("md", "md-old")
	if err := e.ctl.Scale(ctx, "md", 3); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := g.Attempt(ctx, "a1")
	if err != nil || len(s.Machines) != 1 || s.Waiting != 0 {
		t.Fatalf("attempt a1: %+v, %v; want the machine of md-old", s, err)
	}
	for name, m := range e.machines("md") {
		owner := m.GetOwnerReferences()[0].Name
		if attempt := m.GetLabels()[nodegroups.LabelAttempt]; (attempt == "a1") != (name == s.Machines[0]) || (attempt == "a1" && owner != "md-old") {
			t.Errorf("machine %s of MachineSet %s labelled with attempt %q", name, owner, attempt)
		}
	}
}
