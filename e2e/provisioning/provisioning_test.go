package provisioning

import (
	"context"
	"fmt"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/test/wrappers"
)

var _ = framework.Describe("ProvisioningRequest", ginkgo.Label(framework.LabelProvisioning), ginkgo.Serial, func() {
	f := framework.NewFramework("provisioning")
	var e *env
	var cpus int // of all kwok nodes together

	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		e = newEnv(f)
		list, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodes.ManagedLabel + "=true"})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		cpus = 0
		for _, n := range list.Items {
			cpus += int(n.Status.Allocatable.Cpu().Value())
		}
		gomega.Expect(cpus).To(gomega.BeNumerically(">=", 4))
		e.template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1"))
		ginkgo.DeferCleanup(func(ctx context.Context) { f.DeletePods(ctx) })
	})

	create := func(ctx context.Context, name string, count int, params map[string]provv1.Parameter) *provv1.ProvisioningRequest {
		return e.request(ctx, name, provv1.ClassCheckCapacity, "workers", count, params)
	}
	pod := func(ctx context.Context, name string, consumes string) {
		p := wrappers.MakePod(name, f.Namespace).Requests("cpu", "1", "memory", "64Mi")
		if consumes != "" {
			p.Annotation(provv1.AnnotationConsume, consumes)
		}
		f.CreatePod(ctx, p)
	}
	ginkgo.It("books the whole cluster for a request that fits, keeps other pods off it, lets the request's pods in, and releases it when deleted", func(ctx ginkgo.SpecContext) {
		ginkgo.By(fmt.Sprintf("requesting capacity for %d one-CPU pods, all the kwok nodes hold", cpus))
		pr := create(ctx, "all", cpus, nil)
		c := e.waitCondition(ctx, "all", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		ginkgo.GinkgoWriter.Printf("Provisioned: %s\n", c.Message)
		booked, _ := e.bookedPods(ctx, pr)
		gomega.Expect(booked).To(gomega.Equal(cpus))

		ginkgo.By("creating a pod that does not consume the request, and one that does")
		pod(ctx, "outsider", "")
		pod(ctx, "insider", "all")
		framework.Eventually(ctx, func() string { return e.nodeOf(ctx, "insider") }).ShouldNot(gomega.BeEmpty())
		gomega.Consistently(ctx, func() string { return e.nodeOf(ctx, "outsider") }).WithTimeout(5*time.Second).Should(gomega.BeEmpty(),
			"a pod that does not consume the request took booked capacity")

		ginkgo.By("deleting the request: its booking is released and the outsider runs")
		gomega.Expect(e.f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Delete(ctx, "all", metav1.DeleteOptions{})).To(gomega.Succeed())
		framework.Eventually(ctx, func() int { return e.bookings(ctx, pr) }).Should(gomega.BeZero())
		framework.Eventually(ctx, func() string { return e.nodeOf(ctx, "outsider") }).ShouldNot(gomega.BeEmpty())
	})

	ginkgo.It("fails a request that does not fit with noRetry, with the scheduler's reason", func(ctx ginkgo.SpecContext) {
		pr := create(ctx, "too-big", cpus+1, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
		c := e.waitCondition(ctx, "too-big", provv1.ConditionFailed, provv1.ReasonCapacityIsNotFound)
		gomega.Expect(c.Message).To(gomega.ContainSubstring("Insufficient cpu"))
		gomega.Expect(e.bookings(ctx, pr)).To(gomega.BeZero())
	})

	ginkgo.It("fails a request its namespace's quota cannot admit, booking nothing", func(ctx ginkgo.SpecContext) {
		q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "cpu"},
			Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("1")}}}
		_, err := f.Client.CoreV1().ResourceQuotas(f.Namespace).Create(ctx, q, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		pr := create(ctx, "greedy", 2, nil)
		c := e.waitCondition(ctx, "greedy", provv1.ConditionFailed, provisioning.ReasonQuotaExceeded)
		gomega.Expect(c.Message).To(gomega.ContainSubstring("requests.cpu requested 2"))
		gomega.Expect(e.bookings(ctx, pr)).To(gomega.BeZero())
	})

	ginkgo.It("lets gated consumer pods, as Kueue makes them, be narrowed to the booked nodes and ungated in one update", func(ctx ginkgo.SpecContext) {
		ginkgo.By("creating two gated pods that consume the request, and the request")
		for _, name := range []string{"worker-0", "worker-1"} {
			f.CreatePod(ctx, wrappers.MakePod(name, f.Namespace).Requests("cpu", "1", "memory", "64Mi").Gated("kueue.x-k8s.io/admission").
				Annotation(provv1.AnnotationConsume, "gated"))
		}
		pr := create(ctx, "gated", 2, nil)
		e.waitCondition(ctx, "gated", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)

		ginkgo.By("reading the booked nodes from the request's reservations")
		list, err := e.f.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + string(pr.UID)})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		booked := map[string]bool{}
		var nodeNames []string
		for _, r := range list.Items {
			if !booked[r.Status.NodeName] {
				booked[r.Status.NodeName] = true
				nodeNames = append(nodeNames, r.Status.NodeName)
			}
		}
		gomega.Expect(nodeNames).NotTo(gomega.BeEmpty())

		ginkgo.By(fmt.Sprintf("narrowing each pod to %v and removing its gate in the same update", nodeNames))
		for _, name := range []string{"worker-0", "worker-1"} {
			live, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			p := &wrappers.PodWrapper{Pod: *live}
			p.Spec.SchedulingGates = nil
			p.RequiredTerms(wrappers.Term(wrappers.In(v1.LabelHostname, nodeNames...)))
			_, err = f.Client.CoreV1().Pods(f.Namespace).Update(ctx, p.Obj(), metav1.UpdateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "kube-apiserver refused the narrowing update of gated pod %s", name)
		}
		for _, name := range []string{"worker-0", "worker-1"} {
			framework.Eventually(ctx, func() string { return e.nodeOf(ctx, name) }).Should(gomega.BeElementOf(nodeNames))
		}
		ginkgo.By("checking both pods came into the request's booking: it ends as consumed, and is released")
		e.waitCondition(ctx, "gated", provv1.ConditionBookingExpired, provisioning.ReasonCapacityBookingConsumed)
		framework.Eventually(ctx, func() int { return e.bookings(ctx, pr) }).Should(gomega.BeZero())
	})
})
