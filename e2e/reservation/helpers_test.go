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

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	schedclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned/typed/scheduling/v1alpha1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/scheduler/plugins/reservation"
)

// tester is what every spec of the suite works with: the framework's
// namespace and clients, and the cluster's kwok nodes.
type tester struct {
	*framework.Framework
	rsv schedclient.ReservationInterface
	// nodes are the cluster's kwok nodes, by name.
	nodes []v1.Node
}

// newTester registers, after the framework's, the setup of every spec:
// wait for the cluster to be idle, without reservations, and end the spec
// with framework.EndSpec.
func newTester(f *framework.Framework) *tester {
	t := &tester{Framework: f}
	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		t.rsv = t.Gantry.SchedulingV1alpha1().Reservations()
		t.nodes = framework.KwokNodes(ctx, 3)
		ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) { t.EndSpec(ctx, t.nodes, t.dump) })
		// A spec measures capacity from zero.
		framework.ExpectIdle(ctx, t.nodes, func(g gomega.Gomega) {
			rs, err := t.rsv.List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(reservationNames(rs.Items)).To(gomega.BeEmpty(), "reservations left by an earlier spec")
		})
	})
	return t
}

// dump writes every reservation, and the Reservation plugin's view of
// every node, into the spec's artifacts.
func (t *tester) dump(ctx context.Context) {
	if rs, err := t.rsv.List(ctx, metav1.ListOptions{}); err == nil {
		framework.WriteSpecArtifactJSON("reservations.json", rs)
	}
	if framework.TestContext.Local == nil {
		return
	}
	views := map[string]any{}
	for _, n := range t.nodes {
		nrs, err := getNodeReservations(ctx, n.Name)
		if err != nil {
			views[n.Name] = err.Error()
			continue
		}
		views[n.Name] = nrs
	}
	framework.WriteSpecArtifactJSON("node-reservations.json", views)
}

func reservationNames(rs []schedv1alpha1.Reservation) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s (%s on %q)", r.Name, r.Status.Phase, r.Status.NodeName))
	}
	return out
}

// waitReservation waits until check passes on reservation name and
// returns the reservation it passed on.
func (t *tester) waitReservation(ctx context.Context, name string, check func(g gomega.Gomega, r *schedv1alpha1.Reservation)) *schedv1alpha1.Reservation {
	ginkgo.GinkgoHelper()
	var r *schedv1alpha1.Reservation
	framework.Eventually(ctx, func(g gomega.Gomega) {
		var err error
		r, err = t.rsv.Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		check(g, r)
	}).Should(gomega.Succeed(), "reservation %s", name)
	return r
}

// waitAvailable waits until the reservation is placed and holds its capacity.
func (t *tester) waitAvailable(ctx context.Context, name string) *schedv1alpha1.Reservation {
	ginkgo.GinkgoHelper()
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

// allocationOf reads the reservation an owner pod was placed in.
func allocationOf(p *v1.Pod) (schedv1alpha1.ReservationAllocation, bool) {
	var a schedv1alpha1.ReservationAllocation
	v, ok := p.Annotations[schedv1alpha1.AnnotationAllocated]
	if !ok {
		return a, false
	}
	return a, json.Unmarshal([]byte(v), &a) == nil
}

// expectAllocatedTo checks the pod carries the allocation annotation naming r.
func expectAllocatedTo(g gomega.Gomega, p *v1.Pod, r *schedv1alpha1.Reservation) {
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

func podRef(p *v1.Pod) string { return fmt.Sprintf("%s/%s/%s", p.Namespace, p.Name, p.UID) }

// milliCPU is the node's allocatable CPU in millicores.
func milliCPU(n *v1.Node) int64 { return n.Status.Allocatable.Cpu().MilliValue() }

func cpuMilli(l v1.ResourceList) int64 { return l.Cpu().MilliValue() }

func memBytes(l v1.ResourceList) int64 { return l.Memory().Value() }

func podRequests(p *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

// The scheduler's REST services, as the specs call them: the paths are the
// API the specs hold the scheduler to, so they are written out here.
const (
	servicesPath         = "/gantry/v1/__services__"
	nodesPath            = "/gantry/v1/nodes/"
	nodeReservationsPath = "/gantry/v1/plugins/Reservation/nodeReservations/"
)

// getNodeReservations is the Reservation plugin's view of the
// reservations on node.
func getNodeReservations(ctx context.Context, node string) ([]reservation.NodeReservation, error) {
	var out []reservation.NodeReservation
	return out, framework.SchedulerGetJSON(ctx, nodeReservationsPath+node, &out)
}

// viewEntry finds the entry of uid among the pods of a node view.
func viewEntry(v *frameworkext.NodeView, uid types.UID) *frameworkext.NodeViewPod {
	for i := range v.Pods {
		if v.Pods[i].UID == uid {
			return &v.Pods[i]
		}
	}
	return nil
}

// findNodeReservation finds reservation name in a nodeReservations answer.
func findNodeReservation(nrs []reservation.NodeReservation, name string) *reservation.NodeReservation {
	for i := range nrs {
		if nrs[i].Name == name {
			return &nrs[i]
		}
	}
	return nil
}

// expectSameResources compares CPU and memory of two resource lists
// (absent is zero).
func expectSameResources(g gomega.Gomega, got, want v1.ResourceList, what string, args ...any) {
	desc := fmt.Sprintf(what, args...)
	g.Expect(cpuMilli(got)).To(gomega.Equal(cpuMilli(want)), "%s: cpu of %v, want %v", desc, got, want)
	g.Expect(memBytes(got)).To(gomega.Equal(memBytes(want)), "%s: memory of %v, want %v", desc, got, want)
}

// checkAccounting checks that the scheduler counts everything exactly once:
// on every node, what its cache says is requested is the sum of what stands
// there, and that is exactly the live pods bound to the node (from the
// API) plus, once each, what the node's live reservations still hold; and
// every Available reservation not consumed is held on its own node and
// nowhere else.
func (t *tester) checkAccounting(ctx context.Context, g gomega.Gomega) {
	pods, err := t.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	rs, err := t.rsv.List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	heldOn := map[types.UID]string{}
	for _, n := range t.nodes {
		v, err := framework.SchedulerNodeView(ctx, n.Name)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		nrs, err := getNodeReservations(ctx, n.Name)
		g.Expect(err).NotTo(gomega.HaveOccurred())

		var sum []v1.ResourceList
		got := map[types.UID]v1.ResourceList{}
		for _, p := range v.Pods {
			g.Expect(got).NotTo(gomega.HaveKey(p.UID), "node %s lists %s/%s twice", n.Name, p.Namespace, p.Name)
			got[p.UID] = p.Requests
			sum = append(sum, p.Requests)
		}
		expectSameResources(g, v.Requested, reservation.Sum(sum...), "node %s: requested vs the sum of its pods %v", n.Name, v.Pods)

		want := map[types.UID]v1.ResourceList{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName == n.Name && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
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
		if r.Status.Phase == schedv1alpha1.ReservationAvailable && !reservation.Consumed(&r) {
			g.Expect(heldOn[r.UID]).To(gomega.Equal(r.Status.NodeName), "Available reservation %s", r.Name)
		} else {
			g.Expect(heldOn).NotTo(gomega.HaveKey(r.UID), "%s reservation %s is still held", r.Status.Phase, r.Name)
		}
	}
}

func keys[V any](m map[types.UID]V) []types.UID {
	out := make([]types.UID, 0, len(m))
	for k := range m {
		out = append(out, k)
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
