package gangs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/gangs"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	kwoknodes "github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/test/util"
	utilgomega "github.com/gantry-dev/gantry/test/util/gomega"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// quiet is how long a spec watches that a gang that must wait stays
// unbound, and that what it must not preempt stays.
const quiet = 10 * time.Second

var _ = framework.Describe("Gangs", ginkgo.Label(framework.LabelGangs), ginkgo.Serial, func() {
	f := framework.NewFramework("gangs")
	var nodes []v1.Node

	// ownNodes keeps a gang on the suite's kwok nodes: no node group's node
	// has the label, so the request made for it cannot scale up.
	ownNodes := map[string]string{kwoknodes.ManagedLabel: "true"}

	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		nodes = framework.KwokNodes(ctx, 2)[:2]
		ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) { f.EndSpec(ctx, nodes, nil) })
		framework.ExpectIdle(ctx, nodes, nil)
	})

	// gang creates PodGroup name, placed all or nothing, and its members:
	// pods labelled gang=name asking cpu each, of priority class class
	// (the group's too) when not empty, and with nodeSelector sel.
	gang := func(ctx context.Context, name string, members int, cpu, class string, sel map[string]string) {
		ginkgo.GinkgoHelper()
		pg := wrappers.MakePodGroup(name, f.Namespace, int32(members)).PriorityClass(class).Obj()
		_, err := f.Client.SchedulingV1beta1().PodGroups(f.Namespace).Create(ctx, pg, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating PodGroup %s", name)
		for i := range members {
			p := wrappers.MakePod(fmt.Sprintf("%s-%d", name, i), f.Namespace).Label("gang", name).
				Requests("cpu", cpu, "memory", "64Mi").PriorityClass(class).PodGroup(name).NoGrace()
			for k, v := range sel {
				p.NodeSelector(k, v)
			}
			f.CreatePod(ctx, p)
		}
	}
	bound := func(ctx context.Context, selector string) []string {
		list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		var out []string
		for _, p := range list.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				out = append(out, p.Name+"@"+p.Spec.NodeName)
			}
		}
		return out
	}
	// cpus is the kwok nodes' allocatable CPU, whole CPUs, by node.
	cpus := func() []int {
		out := make([]int, len(nodes))
		for i := range nodes {
			out[i] = int(nodes[i].Status.Allocatable.Cpu().MilliValue() / 1000)
		}
		return out
	}
	total := func() int {
		n := 0
		for _, c := range cpus() {
			n += c
		}
		return n
	}
	deletePods := func(ctx context.Context, names ...string) {
		ginkgo.GinkgoHelper()
		for _, name := range names {
			err := f.Client.CoreV1().Pods(f.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting pod %s", name)
		}
	}
	requestBookings := func(ctx context.Context, uid string) []schedv1alpha1.Reservation {
		list, err := f.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + uid})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return list.Items
	}
	waitCondition := func(ctx context.Context, name, typ, reason string) *metav1.Condition {
		ginkgo.GinkgoHelper()
		pr := utilgomega.Must(util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, f.Gantry, f.Namespace, name, typ, metav1.ConditionTrue, reason))
		return meta.FindStatusCondition(pr.Status.Conditions, typ)
	}

	ginkgo.It("places a gang whole in the booking of a request for its PodGroup, or not at all, and keeps other gangs out", func(ctx ginkgo.SpecContext) {
		room := total()
		booked := room - 2
		_, err := f.Client.CoreV1().PodTemplates(f.Namespace).Create(ctx,
			wrappers.MakePodTemplate("member", f.Namespace).Requests("cpu", "1", "memory", "64Mi").Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		pr := wrappers.MakeProvisioningRequest("trainer", f.Namespace, provv1.ClassCheckCapacity).PodSet("member", int32(booked)).
			Parameters(map[string]provv1.Parameter{provisioning.ParameterPodGroup: "trainer"}).Obj()
		pr, err = f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Create(ctx, pr, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		uid := string(pr.UID)
		waitCondition(ctx, "trainer", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		framework.Eventually(ctx, func(g gomega.Gomega) {
			rs := requestBookings(ctx, uid)
			g.Expect(rs).NotTo(gomega.BeEmpty())
			for _, r := range rs {
				g.Expect(r.Status.NodeName).NotTo(gomega.BeEmpty(), "booking %s not placed", r.Name)
				g.Expect(r.Spec.Owners).To(gomega.ContainElement(gomega.HaveField("PodGroup", "trainer")), "booking %s is not for PodGroup trainer", r.Name)
			}
			n, _ := provisioning.BookingPods(rs)
			g.Expect(n).To(gomega.Equal(booked))
		}).Should(gomega.Succeed())

		ginkgo.By("two pods outside the request take the room left")
		for i := range 2 {
			f.CreatePod(ctx, wrappers.MakePod(fmt.Sprintf("outsider-%d", i), f.Namespace).Label("outsider", "true").Requests("cpu", "1", "memory", "64Mi").NoGrace())
		}
		framework.Eventually(ctx, func() []string { return bound(ctx, "outsider") }).Should(gomega.HaveLen(2))

		ginkgo.By(fmt.Sprintf("a gang of %d, one more than booked, is placed not at all; a gang of another group may not use the booking", booked+1))
		gang(ctx, "trainer", booked+1, "1", "", ownNodes)
		gang(ctx, "intruder", 2, "1", "", ownNodes)
		gomega.Consistently(ctx, func() []string { return bound(ctx, "gang in (trainer,intruder)") }).WithTimeout(quiet).
			Should(gomega.BeEmpty(), "a gang was placed in part, or beside its group's booking")
		b, came := provisioning.BookingPods(requestBookings(ctx, uid))
		gomega.Expect([]int{b, came}).To(gomega.Equal([]int{booked, 0}), "the booking while the gang waits: booked and come")

		ginkgo.By("the intruders and the outsiders go: the whole gang is placed, and its booking consumed")
		deletePods(ctx, "intruder-0", "intruder-1", "outsider-0", "outsider-1")
		framework.Eventually(ctx, func() []string { return bound(ctx, "gang=trainer") }).Should(gomega.HaveLen(booked + 1))
		c := waitCondition(ctx, "trainer", provv1.ConditionBookingExpired, provisioning.ReasonCapacityBookingConsumed)
		ginkgo.GinkgoWriter.Printf("BookingExpired: %s\n", c.Message)
		framework.Eventually(ctx, func() []schedv1alpha1.Reservation { return requestBookings(ctx, uid) }).Should(gomega.BeEmpty(), "the booking was not released")
	})

	ginkgo.It("makes an atomic scale-up request for a gang that fits no node, places the gang whole on the new nodes, and deletes the request", func(ctx ginkgo.SpecContext) {
		groupNodes := func(ctx context.Context) []v1.Node {
			list, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=general"})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			return list.Items
		}
		// Registered after EndSpec, so it runs before it: the gang goes, then
		// the nodes made for it.
		ginkgo.DeferCleanup(func(ctx context.Context) {
			f.DeleteWorkloads(ctx)
			framework.Eventually(ctx, func() []v1.Node { return groupNodes(ctx) }).Should(gomega.BeEmpty(), "the provisioner's nodes were not removed after the spec")
		})
		framework.RequireProvisionerArg("pod-group-requests-class", "the spec needs requests made for unschedulable gangs")
		// A member of 6 CPU takes a node of group general (8 CPU) alone; no
		// node of the cluster is in that group.
		gang(ctx, "trainer", 3, "6", "", map[string]string{nodegroups.LabelNodeGroup: "general"})
		name := gangs.RequestName("trainer")
		var pr *provv1.ProvisioningRequest
		framework.Eventually(ctx, func() error {
			var err error
			pr, err = f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, name, metav1.GetOptions{})
			return err
		}).Should(gomega.Succeed(), "no request made for the unschedulable gang")
		gomega.Expect(pr.Spec.PodSets).To(gomega.HaveLen(1))
		gomega.Expect(pr.Spec.PodSets[0].Count).To(gomega.BeEquivalentTo(3))
		gomega.Expect(pr.Spec.Parameters).To(gomega.HaveKeyWithValue(provisioning.ParameterPodGroup, provv1.Parameter("trainer")))
		gomega.Expect(pr.OwnerReferences).To(gomega.ContainElement(gomega.HaveField("Kind", "PodGroup")))

		framework.Eventually(ctx, func() []string { return bound(ctx, "gang=trainer") }).Should(gomega.HaveLen(3), "the gang was not placed whole")
		gomega.Expect(groupNodes(ctx)).To(gomega.HaveLen(3))
		framework.Eventually(ctx, func() bool {
			_, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).Should(gomega.BeTrue(), "the request outlived the gang's placement")
		templates, err := f.Client.CoreV1().PodTemplates(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: gangs.LabelPodGroupUID})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(templates.Items).To(gomega.BeEmpty(), "the request's PodTemplates outlived it")
		events := podGroupEvents(ctx, f, "trainer")
		gomega.Expect(events).To(gomega.ContainSubstring(gangs.ReasonRequestCreated))
		gomega.Expect(events).To(gomega.ContainSubstring(gangs.ReasonRequestReleased))
	})

	ginkgo.It("preempts for a whole gang, and nothing for a gang that would not fit whole", func(ctx ginkgo.SpecContext) {
		low := f.CreatePriorityClass(ctx, "low", 10, "")
		high := f.CreatePriorityClass(ctx, "high", 1000, "")
		ginkgo.By("low-priority pods of one CPU fill both nodes")
		n := 0
		for i, c := range cpus() {
			for range c {
				f.CreatePod(ctx, wrappers.MakePod(fmt.Sprintf("low-%d", n), f.Namespace).Label("tier", "low").PriorityClass(low).
					Requests("cpu", "1", "memory", "64Mi").OnNode(nodes[i].Name).NoGrace())
				n++
			}
		}
		framework.Eventually(ctx, func() []string { return bound(ctx, "tier=low") }).Should(gomega.HaveLen(n))

		// Members of more than half the largest node: a node holds one at
		// most, so a gang of one member more than there are nodes that hold
		// one never fits, though each of its members would alone.
		big := max(cpus()[0], cpus()[1])/2 + 1
		holders := 0
		for _, c := range cpus() {
			if c >= big {
				holders++
			}
		}
		ginkgo.By(fmt.Sprintf("a gang of %d members of %d CPU, more than the nodes hold, preempts nothing", holders+1, big))
		gang(ctx, "toobig", holders+1, fmt.Sprint(big), high, ownNodes)
		gomega.Consistently(ctx, func() []string { return bound(ctx, "tier=low") }).WithTimeout(quiet).
			Should(gomega.HaveLen(n), "pods were preempted for a gang that cannot fit whole")
		gomega.Expect(bound(ctx, "gang=toobig")).To(gomega.BeEmpty())
		toobig := make([]string, 0, holders+1)
		for i := range holders + 1 {
			toobig = append(toobig, fmt.Sprintf("toobig-%d", i))
		}
		deletePods(ctx, toobig...)

		ginkgo.By("a gang of two members of one CPU preempts two pods and is placed whole")
		gang(ctx, "fits", 2, "1", high, ownNodes)
		framework.Eventually(ctx, func() []string { return bound(ctx, "gang=fits") }).Should(gomega.HaveLen(2))
		gomega.Expect(bound(ctx, "tier=low")).To(gomega.HaveLen(n-2), "the gang of 2 CPU preempted other than two one-CPU pods")
	})
})

// podGroupEvents are the reasons and messages of PodGroup name's events,
// one per line.
func podGroupEvents(ctx context.Context, f *framework.Framework, name string) string {
	list, err := f.Client.CoreV1().Events(f.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=PodGroup,involvedObject.name=" + name})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var b strings.Builder
	for _, ev := range list.Items {
		fmt.Fprintf(&b, "%s: %s\n", ev.Reason, ev.Message)
	}
	return b.String()
}
