package provisioning

import (
	"context"
	"fmt"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// The local cluster's provisioner scales the kwok node groups of
// kind/pkg/runtime/local.NodeGroups: "general" (8 CPUs per node) and
// "flaky", where one node of every scale-up never comes up and only pods
// tolerating gantry.dev/failure-injection go.
var _ = framework.Describe("ProvisioningRequest atomic scale-up", ginkgo.Label(framework.LabelProvisioning), ginkgo.Serial, func() {
	f := framework.NewFramework("atomic")
	var e *env

	groupNodes := func(ctx context.Context, group string) []v1.Node {
		list, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=" + group})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return list.Items
	}
	// class creates an atomic-scale-up class, deleted after the spec.
	class := func(ctx context.Context, c *wrappers.ProvisioningClassWrapper) {
		_, err := e.f.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Create(ctx, c.Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = e.f.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Delete(ctx, c.Name, metav1.DeleteOptions{})
		})
	}
	atomic := func(name string) *wrappers.ProvisioningClassWrapper {
		return wrappers.MakeProvisioningClass(name, autoscalingv1alpha1.HandlerAtomicScaleUp)
	}
	// A pod of 6 CPUs takes a node of its group alone.
	groupTemplate := func(group string) *wrappers.PodTemplateWrapper {
		return wrappers.MakePodTemplate(group, f.Namespace).Requests("cpu", "6").
			NodeSelector(nodegroups.LabelNodeGroup, group).Toleration("gantry.dev/failure-injection")
	}
	groupPod := func(ctx context.Context, name, group, consumes string) {
		p := wrappers.MakePod(name, f.Namespace).Requests("cpu", "6", "memory", "64Mi").NodeSelector(nodegroups.LabelNodeGroup, group)
		if consumes != "" {
			p.Annotation(provv1.AnnotationConsume, consumes)
		}
		f.CreatePod(ctx, p)
	}
	deleteRequest := func(ctx context.Context, name string) {
		gomega.Expect(e.f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Delete(ctx, name, metav1.DeleteOptions{})).To(gomega.Succeed())
		framework.Eventually(ctx, func() bool {
			_, err := e.f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).Should(gomega.BeTrue(), "request %s still there (its finalizer releases the booking)", name)
	}

	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		e = newEnv(f)
		e.template(ctx, groupTemplate("general"))
		e.template(ctx, groupTemplate("flaky"))
		// Registered first, so it runs last: every spec leaves the cluster
		// as it found it, with no node the provisioner made.
		ginkgo.DeferCleanup(func(ctx context.Context) {
			framework.Eventually(ctx, func() int { return len(groupNodes(ctx, "general")) + len(groupNodes(ctx, "flaky")) }).
				Should(gomega.BeZero(), "the provisioner's nodes were not removed after the spec")
		})
		ginkgo.DeferCleanup(func(ctx context.Context) { f.DeletePods(ctx) })
	})

	ginkgo.It("adds 100 nodes in one step, books them against other pods, and lets the request's pods in", func(ctx ginkgo.SpecContext) {
		start := time.Now()
		e.request(ctx, "hundred", provv1.ClassBestEffortAtomicScaleUp, "general", 100, nil)
		c := e.waitCondition(ctx, "hundred", provv1.ConditionProvisioned, provv1.ReasonCapacityIsProvisioned)
		ginkgo.GinkgoWriter.Printf("100 kwok nodes: request to Provisioned=True in %s: %s\n", time.Since(start).Round(time.Millisecond), c.Message)
		gomega.Expect(groupNodes(ctx, "general")).To(gomega.HaveLen(100))
		got, err := e.f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, "hundred", metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if n := got.Annotations[provisioning.AnnotationAttempts]; n != "" {
			// Provisioned all the same, but a fault-free cluster should not
			// need a retry: leave the why in the log.
			ginkgo.GinkgoWriter.Printf("WARNING: %s failed attempts before Provisioned; events:%s\n", n, e.events(ctx, "hundred"))
		}

		ginkgo.By("a pod that does not consume the request finds every new node booked")
		groupPod(ctx, "outsider", "general", "")
		gomega.Consistently(ctx, func() string { return e.nodeOf(ctx, "outsider") }).WithTimeout(5*time.Second).Should(gomega.BeEmpty(),
			"a pod that does not consume the request took booked capacity")

		ginkgo.By("the request's 100 pods land on the 100 new nodes, one each")
		for i := range 100 {
			groupPod(ctx, fmt.Sprintf("worker-%d", i), "general", "hundred")
		}
		framework.Eventually(ctx, func(g gomega.Gomega) {
			used := map[string]bool{}
			for i := range 100 {
				n := e.nodeOf(ctx, fmt.Sprintf("worker-%d", i))
				g.Expect(n).NotTo(gomega.BeEmpty(), "worker-%d not scheduled", i)
				used[n] = true
			}
			g.Expect(used).To(gomega.HaveLen(100))
		}).Should(gomega.Succeed())
		gomega.Expect(e.nodeOf(ctx, "outsider")).To(gomega.BeEmpty())
		deleteRequest(ctx, "hundred")
	})

	ginkgo.It("rolls back an attempt with a node that never comes up, retries, and fails when the validity ends", func(ctx ginkgo.SpecContext) {
		class(ctx, atomic("e2e-flaky").NodeGroups("flaky").
			ProvisioningTimeout(5*time.Second).ValidUntilSeconds(20).Backoff(time.Second, time.Second))
		pr := e.request(ctx, "flaky", "e2e-flaky", "flaky", 3, nil)
		e.waitConditionStatus(ctx, "flaky", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp)
		gomega.Expect(len(groupNodes(ctx, "flaky"))).To(gomega.BeNumerically("<=", 3))
		c := e.waitCondition(ctx, "flaky", provv1.ConditionFailed, provisioning.ReasonValidityExpired)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)
		// The last attempt found the group failed again, or backed off
		// after its failure (the cluster's provisioner backs a group off
		// for cluster.NodeGroupBackoff).
		gomega.Expect(c.Message).To(gomega.Or(gomega.ContainSubstring("were not Ready within the provisioning timeout"),
			gomega.ContainSubstring("flaky is backed off until")))
		gomega.Expect(e.events(ctx, "flaky")).To(gomega.ContainSubstring("were not Ready within the provisioning timeout"),
			"no rollback of an attempt whose node never came up")
		got, err := e.f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, "flaky", metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(got.Annotations[provisioning.AnnotationAttempts]).NotTo(gomega.BeElementOf("", "1"), "the attempt was not retried")
		gomega.Expect(groupNodes(ctx, "flaky")).To(gomega.BeEmpty(), "a failed attempt left nodes behind")
		gomega.Expect(e.bookings(ctx, pr)).To(gomega.BeZero())
	})

	ginkgo.It("stops an attempt in flight when its request is deleted and removes its nodes", func(ctx ginkgo.SpecContext) {
		class(ctx, atomic("e2e-flaky-patient").NodeGroups("flaky"))
		e.request(ctx, "cancelled", "e2e-flaky-patient", "flaky", 3, nil)
		e.waitConditionStatus(ctx, "cancelled", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp)
		gomega.Expect(groupNodes(ctx, "flaky")).To(gomega.HaveLen(3))
		deleteRequest(ctx, "cancelled")
		framework.Eventually(ctx, func() []v1.Node { return groupNodes(ctx, "flaky") }).Should(gomega.BeEmpty())
	})

	ginkgo.It("scales the nodes of an expired booking down, and no other node", func(ctx ginkgo.SpecContext) {
		class(ctx, atomic("e2e-brief").NodeGroups("general").BookingDuration(5*time.Second))
		before, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.ManagedLabel + "=true"})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		e.request(ctx, "brief", "e2e-brief", "general", 3, nil)
		e.waitCondition(ctx, "brief", provv1.ConditionProvisioned, provv1.ReasonCapacityIsProvisioned)
		gomega.Expect(groupNodes(ctx, "general")).To(gomega.HaveLen(3))
		e.waitCondition(ctx, "brief", provv1.ConditionBookingExpired, provisioning.ReasonBookingExpired)
		start := time.Now()
		framework.Eventually(ctx, func() []v1.Node { return groupNodes(ctx, "general") }).Should(gomega.BeEmpty())
		ginkgo.GinkgoWriter.Printf("scaled down %s after the booking expired\n", time.Since(start).Round(time.Second))
		after, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.ManagedLabel + "=true"})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(after.Items).To(gomega.HaveLen(len(before.Items)), "scale-down removed a node the provisioner did not create")
	})
})
