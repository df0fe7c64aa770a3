package provisioning

import (
	"context"
	"fmt"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/e2e/framework"
	. "github.com/gantry-dev/gantry/test/wrappers" // builders read as a DSL
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
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
		e.template(ctx, "workers", "1", nil)
		ginkgo.DeferCleanup(func(ctx context.Context) { f.DeletePods(ctx) })
	})

	create := func(ctx context.Context, name string, count int, params map[string]provv1.Parameter) *provv1.ProvisioningRequest {
		return e.request(ctx, name, provv1.ClassCheckCapacity, "workers", count, params)
	}
	pod := func(ctx context.Context, name string, consumes string) {
		p := MakePod(name, f.Namespace).Requests("cpu", "1", "memory", "64Mi")
		if consumes != "" {
			p.Annotation(provv1.AnnotationConsume, consumes)
		}
		p.NoGrace()
		_, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, p.Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
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
		gomega.Expect(e.gc.AutoscalingXV1().ProvisioningRequests(f.Namespace).Delete(ctx, "all", metav1.DeleteOptions{})).To(gomega.Succeed())
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
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "cpu"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1")}}}
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
			p := MakePod(name, f.Namespace).Requests("cpu", "1", "memory", "64Mi").Gated("kueue.x-k8s.io/admission").
				Annotation(provv1.AnnotationConsume, "gated")
			p.NoGrace()
			_, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, p.Obj(), metav1.CreateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
		}
		pr := create(ctx, "gated", 2, nil)
		e.waitCondition(ctx, "gated", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)

		ginkgo.By("reading the booked nodes from the request's reservations")
		list, err := e.gc.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + string(pr.UID)})
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
			p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			p.Spec.SchedulingGates = nil
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{Term(In(corev1.LabelHostname, nodeNames...))}}}}
			_, err = f.Client.CoreV1().Pods(f.Namespace).Update(ctx, p, metav1.UpdateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "kube-apiserver refused the narrowing update of gated pod %s", name)
		}
		for _, name := range []string{"worker-0", "worker-1"} {
			framework.Eventually(ctx, func() string { return e.nodeOf(ctx, name) }).Should(gomega.BeElementOf(nodeNames))
		}
		ginkgo.By("checking both pods came into the request's booking")
		framework.Eventually(ctx, func() int {
			_, came := e.bookedPods(ctx, pr)
			return came
		}).Should(gomega.Equal(2))
	})
})
