package reservation

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	schedclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned/typed/scheduling/v1alpha1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	. "github.com/gantry-dev/gantry/test/wrappers" // builders read as a DSL
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
)

// specLabel marks the reservations of a spec with its namespace, so that
// they are removed with it.
const specLabel = "e2e.gantry.dev/namespace"

// tester is what every spec of the suite works with: its namespace and
// clients, and the cluster's nodes.
type tester struct {
	f   *framework.Framework
	rsv schedclient.ReservationInterface
	// nodes are the cluster's kwok nodes, by name.
	nodes []corev1.Node
}

// newTester registers, after the framework's, the setup of every spec:
// wait for the cluster to be empty, and remove the spec's reservations and
// pods after it.
func newTester(f *framework.Framework) *tester {
	t := &tester{f: f}
	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		gc, err := framework.GantryClient()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		t.rsv = gc.SchedulingV1alpha1().Reservations()
		list, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.ManagedLabel + "=true"})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(len(list.Items)).To(gomega.BeNumerically(">=", 3), "the suite needs three kwok nodes")
		t.nodes = list.Items
		slices.SortFunc(t.nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
		ginkgo.DeferCleanup(t.cleanup)
		t.expectIdle(ctx)
	})
	return t
}

func (t *tester) isKwokNode(name string) bool {
	return slices.ContainsFunc(t.nodes, func(n corev1.Node) bool { return n.Name == name })
}

// name makes a reservation name unique to the spec (reservations are
// cluster-scoped).
func (t *tester) name(short string) string { return t.f.Namespace + "-" + short }

// expectIdle waits until no pod is bound to a kwok node and no reservation
// exists, and the scheduler's cache agrees: a spec measures capacity from
// zero.
func (t *tester) expectIdle(ctx context.Context) {
	framework.Eventually(ctx, func(g gomega.Gomega) {
		rs, err := t.rsv.List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(reservationNames(rs.Items)).To(gomega.BeEmpty(), "reservations left by an earlier spec")
		pods, err := t.f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var bound []string
		for _, p := range pods.Items {
			if t.isKwokNode(p.Spec.NodeName) {
				bound = append(bound, p.Namespace+"/"+p.Name)
			}
		}
		g.Expect(bound).To(gomega.BeEmpty(), "pods left on the kwok nodes by an earlier spec")
		if framework.TestContext.Local == nil {
			return
		}
		for _, n := range t.nodes {
			v, err := getNodeView(ctx, n.Name)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(v.Pods).To(gomega.BeEmpty(), "the scheduler's cache still has pods on %s", n.Name)
		}
	}).Should(gomega.Succeed(), "the cluster is not empty at the start of the spec")
}

// cleanup removes the spec's reservations, and, when the spec passed, its
// workloads and pods at once (the framework then deletes the namespace).
// When it failed, the scheduler's views are written to the spec's
// artifacts first, and the namespace is left for the framework to dump.
func (t *tester) cleanup(ctx ginkgo.SpecContext) {
	failed := ginkgo.CurrentSpecReport().Failed()
	if failed {
		t.dump(ctx)
	}
	err := t.rsv.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: specLabel + "=" + t.f.Namespace})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting the spec's reservations")
	if failed {
		return
	}
	apps := t.f.Client.AppsV1()
	bg := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	gomega.Expect(apps.Deployments(t.f.Namespace).DeleteCollection(ctx, bg, metav1.ListOptions{})).To(gomega.Succeed())
	gomega.Expect(apps.ReplicaSets(t.f.Namespace).DeleteCollection(ctx, bg, metav1.ListOptions{})).To(gomega.Succeed())
	t.f.DeletePods(ctx)
}

// dump writes every reservation and the scheduler's views of every node
// into the spec's artifacts.
func (t *tester) dump(ctx context.Context) {
	write := func(file string, v any) {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			ginkgo.GinkgoWriter.Printf("writing %s: %v\n", file, err)
			return
		}
		framework.WriteSpecArtifact(file, data)
	}
	if rs, err := t.rsv.List(ctx, metav1.ListOptions{}); err == nil {
		write("reservations.json", rs)
	}
	if framework.TestContext.Local == nil {
		return
	}
	views := map[string]any{}
	for _, n := range t.nodes {
		v, err := getNodeView(ctx, n.Name)
		nrs, nerr := getNodeReservations(ctx, n.Name)
		views[n.Name] = map[string]any{"node": v, "nodeErr": errString(err), "nodeReservations": nrs, "nodeReservationsErr": errString(nerr)}
	}
	write("scheduler-views.json", views)
	ginkgo.GinkgoWriter.Printf("reservations and scheduler views written to %s\n", framework.SpecArtifacts())
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func reservationNames(rs []schedv1alpha1.Reservation) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s (%s on %q)", r.Name, r.Status.Phase, r.Status.NodeName))
	}
	return out
}

// createReservation creates r under a name unique to the spec, labelled
// for cleanup.
func (t *tester) createReservation(ctx context.Context, r *ReservationWrapper) *schedv1alpha1.Reservation {
	r.Name = t.name(r.Name)
	r.Label(specLabel, t.f.Namespace)
	created, err := t.rsv.Create(ctx, r.Obj(), metav1.CreateOptions{})
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred(), "creating reservation %s", r.Name)
	return created
}

// waitReservation waits until check passes on reservation name and
// returns the reservation it passed on.
func (t *tester) waitReservation(ctx context.Context, name string, check func(g gomega.Gomega, r *schedv1alpha1.Reservation)) *schedv1alpha1.Reservation {
	var r *schedv1alpha1.Reservation
	framework.Eventually(ctx, func(g gomega.Gomega) {
		var err error
		r, err = t.rsv.Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		check(g, r)
	}).WithOffset(1).Should(gomega.Succeed(), "reservation %s", name)
	return r
}

// waitAvailable waits until the reservation is placed and holds its capacity.
func (t *tester) waitAvailable(ctx context.Context, name string) *schedv1alpha1.Reservation {
	return t.waitReservation(ctx, name, func(g gomega.Gomega, r *schedv1alpha1.Reservation) {
		g.Expect(r.Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable), "status: %s", describeStatus(r))
		g.Expect(r.Status.NodeName).NotTo(gomega.BeEmpty())
		expectCondition(g, r, schedv1alpha1.ConditionScheduled, metav1.ConditionTrue, schedv1alpha1.ReasonScheduled)
		expectCondition(g, r, schedv1alpha1.ConditionReady, metav1.ConditionTrue, schedv1alpha1.ReasonAvailable)
	})
}

func expectCondition(g gomega.Gomega, r *schedv1alpha1.Reservation, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	c := meta.FindStatusCondition(r.Status.Conditions, typ)
	g.Expect(c).NotTo(gomega.BeNil(), "reservation %s has no %s condition: %s", r.Name, typ, describeStatus(r))
	g.Expect(c.Status).To(gomega.Equal(status), "reservation %s condition %s: %s", r.Name, typ, describeStatus(r))
	g.Expect(c.Reason).To(gomega.Equal(reason), "reservation %s condition %s: %s", r.Name, typ, describeStatus(r))
	return c
}

func describeStatus(r *schedv1alpha1.Reservation) string {
	data, _ := json.Marshal(r.Status)
	return string(data)
}

// createPod creates p in the spec's namespace; it goes away at once when
// deleted.
func (t *tester) createPod(ctx context.Context, p *PodWrapper) *corev1.Pod {
	p.Namespace = t.f.Namespace
	p.NoGrace()
	created, err := t.f.Client.CoreV1().Pods(t.f.Namespace).Create(ctx, p.Obj(), metav1.CreateOptions{})
	gomega.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred(), "creating pod %s", p.Name)
	return created
}

// waitPod waits until check passes on pod name and returns the pod.
func (t *tester) waitPod(ctx context.Context, name string, check func(g gomega.Gomega, p *corev1.Pod)) *corev1.Pod {
	var p *corev1.Pod
	framework.Eventually(ctx, func(g gomega.Gomega) {
		var err error
		p, err = t.f.Client.CoreV1().Pods(t.f.Namespace).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		check(g, p)
	}).WithOffset(1).Should(gomega.Succeed(), "pod %s", name)
	return p
}

// waitScheduled waits until the pod is bound, and returns it.
func (t *tester) waitScheduled(ctx context.Context, name string) *corev1.Pod {
	return t.waitPod(ctx, name, func(g gomega.Gomega, p *corev1.Pod) {
		g.Expect(p.Spec.NodeName).NotTo(gomega.BeEmpty(), "not bound; conditions %v", p.Status.Conditions)
	})
}

// waitUnschedulable waits until the scheduler has found no node for the pod
// and said so, with a message containing want.
func (t *tester) waitUnschedulable(ctx context.Context, name, want string) *corev1.Pod {
	return t.waitPod(ctx, name, func(g gomega.Gomega, p *corev1.Pod) {
		expectUnschedulable(g, p, want)
	})
}

func expectUnschedulable(g gomega.Gomega, p *corev1.Pod, want string) {
	g.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "pod %s was bound", p.Name)
	c := podCondition(p, corev1.PodScheduled)
	g.Expect(c).NotTo(gomega.BeNil(), "pod %s has no PodScheduled condition yet", p.Name)
	g.Expect(c.Status).To(gomega.Equal(corev1.ConditionFalse))
	g.Expect(c.Reason).To(gomega.Equal(corev1.PodReasonUnschedulable))
	g.Expect(c.Message).To(gomega.ContainSubstring(want))
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// allocationOf reads the reservation an owner pod was placed in.
func allocationOf(p *corev1.Pod) (schedv1alpha1.ReservationAllocation, bool) {
	var a schedv1alpha1.ReservationAllocation
	v, ok := p.Annotations[schedv1alpha1.AnnotationAllocated]
	if !ok {
		return a, false
	}
	return a, json.Unmarshal([]byte(v), &a) == nil
}

// expectAllocatedTo checks the pod carries the allocation annotation naming r.
func expectAllocatedTo(g gomega.Gomega, p *corev1.Pod, r *schedv1alpha1.Reservation) {
	a, ok := allocationOf(p)
	g.Expect(ok).To(gomega.BeTrue(), "pod %s has no readable %s annotation: %v", p.Name, schedv1alpha1.AnnotationAllocated, p.Annotations)
	g.Expect(a).To(gomega.Equal(schedv1alpha1.ReservationAllocation{Name: r.Name, UID: r.UID}), "pod %s", p.Name)
}

// ownerRefs are the pods of a reservation's currentOwners, as
// namespace/name/uid.
func ownerRefs(r *schedv1alpha1.Reservation) []string {
	out := []string{}
	for _, o := range r.Status.CurrentOwners {
		out = append(out, fmt.Sprintf("%s/%s/%s", o.Namespace, o.Name, o.UID))
	}
	return out
}

func podRef(p *corev1.Pod) string { return fmt.Sprintf("%s/%s/%s", p.Namespace, p.Name, p.UID) }

// milliCPU is the node's allocatable CPU in millicores.
func milliCPU(n *corev1.Node) int64 { return n.Status.Allocatable.Cpu().MilliValue() }

func cpuMilli(l corev1.ResourceList) int64 { return l.Cpu().MilliValue() }

func memBytes(l corev1.ResourceList) int64 { return l.Memory().Value() }

func podRequests(p *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

// The scheduler's REST views, as /apis/v1/nodes/{node} and
// /apis/v1/plugins/Reservation/nodeReservations/{node} serve them.
type nodeView struct {
	Name        string              `json:"name"`
	Allocatable corev1.ResourceList `json:"allocatable"`
	Requested   corev1.ResourceList `json:"requested"`
	Pods        []nodeViewPod       `json:"pods"`
}

type nodeViewPod struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	UID       types.UID           `json:"uid"`
	Requests  corev1.ResourceList `json:"requests"`
}

type nodeReservation struct {
	Name         string              `json:"name"`
	UID          types.UID           `json:"uid"`
	Phase        string              `json:"phase"`
	AllocateOnce bool                `json:"allocateOnce"`
	Allocatable  corev1.ResourceList `json:"allocatable"`
	Remaining    corev1.ResourceList `json:"remaining"`
	Allocated    []string            `json:"allocatedPods"`
	Pending      []string            `json:"pendingPods"`
}

const (
	servicesPath         = "/apis/v1/__services__"
	nodesPath            = "/apis/v1/nodes/"
	nodeReservationsPath = "/apis/v1/plugins/Reservation/nodeReservations/"
)

func getNodeView(ctx context.Context, node string) (*nodeView, error) {
	v := &nodeView{}
	return v, framework.SchedulerGetJSON(ctx, nodesPath+node, v)
}

func getNodeReservations(ctx context.Context, node string) ([]nodeReservation, error) {
	var out []nodeReservation
	return out, framework.SchedulerGetJSON(ctx, nodeReservationsPath+node, &out)
}

// viewEntry finds the entry of uid among the pods of a node view.
func viewEntry(v *nodeView, uid types.UID) *nodeViewPod {
	for i := range v.Pods {
		if v.Pods[i].UID == uid {
			return &v.Pods[i]
		}
	}
	return nil
}

// findNodeReservation finds reservation name in a nodeReservations answer.
func findNodeReservation(nrs []nodeReservation, name string) *nodeReservation {
	for i := range nrs {
		if nrs[i].Name == name {
			return &nrs[i]
		}
	}
	return nil
}

// expectSameResources compares CPU and memory of two resource lists
// (absent is zero).
func expectSameResources(g gomega.Gomega, got, want corev1.ResourceList, what string, args ...any) {
	desc := fmt.Sprintf(what, args...)
	g.Expect(cpuMilli(got)).To(gomega.Equal(cpuMilli(want)), "%s: cpu of %v, want %v", desc, got, want)
	g.Expect(memBytes(got)).To(gomega.Equal(memBytes(want)), "%s: memory of %v, want %v", desc, got, want)
}

// checkAccounting checks that the scheduler counts everything exactly once:
// on every node, what its cache says is requested is the sum of what stands
// there, and that is exactly the live pods bound to the node (from the
// API) plus, once each, what the node's live reservations still hold; and
// every Available reservation is held on its own node and nowhere else.
func (t *tester) checkAccounting(ctx context.Context, g gomega.Gomega) {
	pods, err := t.f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	rs, err := t.rsv.List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	heldOn := map[types.UID]string{}
	for _, n := range t.nodes {
		v, err := getNodeView(ctx, n.Name)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		nrs, err := getNodeReservations(ctx, n.Name)
		g.Expect(err).NotTo(gomega.HaveOccurred())

		var sum []corev1.ResourceList
		got := map[types.UID]corev1.ResourceList{}
		for _, p := range v.Pods {
			g.Expect(got).NotTo(gomega.HaveKey(p.UID), "node %s lists %s/%s twice", n.Name, p.Namespace, p.Name)
			got[p.UID] = p.Requests
			sum = append(sum, p.Requests)
		}
		expectSameResources(g, v.Requested, add(sum...), "node %s: requested vs the sum of its pods %v", n.Name, v.Pods)

		want := map[types.UID]corev1.ResourceList{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName == n.Name && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				want[p.UID] = podRequests(p)
			}
		}
		for _, nr := range nrs {
			if len(nr.Remaining) > 0 { // held: owners may still use it
				want[nr.UID] = nr.Remaining
				g.Expect(heldOn).NotTo(gomega.HaveKey(nr.UID), "reservation %s is held on %s and %s", nr.Name, heldOn[nr.UID], n.Name)
				heldOn[nr.UID] = n.Name
			}
		}
		g.Expect(keys(got)).To(gomega.ConsistOf(keys(want)), "node %s: the scheduler's cache %v", n.Name, v.Pods)
		for uid, l := range want {
			expectSameResources(g, got[uid], l, "node %s: entry %s", n.Name, uid)
		}
	}
	for _, r := range rs.Items {
		if r.Status.Phase == schedv1alpha1.ReservationAvailable && !consumed(&r) {
			g.Expect(heldOn[r.UID]).To(gomega.Equal(r.Status.NodeName), "Available reservation %s", r.Name)
		} else {
			g.Expect(heldOn).NotTo(gomega.HaveKey(r.UID), "%s reservation %s is still held", r.Status.Phase, r.Name)
		}
	}
}

// consumed: an allocate-once reservation with an owner (about to be Succeeded).
func consumed(r *schedv1alpha1.Reservation) bool {
	once := r.Spec.AllocateOnce == nil || *r.Spec.AllocateOnce
	return once && len(r.Status.CurrentOwners) > 0
}

func keys[V any](m map[types.UID]V) []types.UID {
	out := make([]types.UID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func add(ls ...corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, l := range ls {
		for name, q := range l {
			cur := out[name]
			cur.Add(q)
			out[name] = cur
		}
	}
	return out
}

// scoreTable is one "Score debug" table of the scheduler log.
type scoreTable struct {
	Header []string
	Rows   [][]string
}

// column returns the value of column name in row i.
func (s *scoreTable) column(i int, name string) string {
	j := slices.Index(s.Header, name)
	if j < 0 || i >= len(s.Rows) || j >= len(s.Rows[i]) {
		return ""
	}
	return s.Rows[i][j]
}

// findScoreTable returns the last "Score debug" table logged for pod
// (namespace/name), if any. klog writes it as a multi-line value:
//
//	I... scores.go:18] "Score debug" pod="ns/p" profile="default-scheduler" nodes=3 table=<
//		#  Node  Total  Reservation ...
//		1  n-1   1436   1000 ...
//	 >
func findScoreTable(log, pod string) *scoreTable {
	start := regexp.MustCompile(`"Score debug" pod="` + regexp.QuoteMeta(pod) + `" .*table=<$`)
	lines := strings.Split(log, "\n")
	var found *scoreTable
	for i := 0; i < len(lines); i++ {
		if !start.MatchString(lines[i]) {
			continue
		}
		t := &scoreTable{}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ">"; i++ {
			fields := strings.Fields(lines[i])
			switch {
			case len(fields) == 0:
			case fields[0] == "#":
				t.Header = fields
			default:
				t.Rows = append(t.Rows, fields)
			}
		}
		found = t
	}
	return found
}
