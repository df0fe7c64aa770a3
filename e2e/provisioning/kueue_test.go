package provisioning

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// kueueCheck is the AdmissionCheck the fixture's requests are named after,
// and kueueConfig the parameters of its ProvisioningRequestConfig, which
// Kueue copies into every request.
const kueueCheck = "provision"

var kueueConfig = map[string]provv1.Parameter{provv1.ParameterValidUntilSeconds: "600"}

var workloadsResource = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta1", Resource: "workloads"}

// The specs act as Kueue's provisioning admission check and its pod
// integration act, with Kueue's names, ownership, gates and parameters,
// against gantry-provisioner (Kueue itself is not installed: a minimal
// Workload CRD stands in for its API).
var _ = framework.Describe("ProvisioningRequest driven as Kueue drives it", ginkgo.Label(framework.LabelProvisioning), ginkgo.Serial, func() {
	f := framework.NewFramework("kueue")
	var (
		e         *env
		workloads dynamic.ResourceInterface
		priority  string
	)

	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		e = newEnv(f)
		installWorkloadCRD(ctx)
		workloads = dynamic.NewForConfigOrDie(framework.TestContext.Config).Resource(workloadsResource).Namespace(f.Namespace)
		priority = f.Namespace + "-high"
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: priority}, Value: 1000}
		_, err := f.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = f.Client.SchedulingV1().PriorityClasses().Delete(ctx, priority, metav1.DeleteOptions{})
		})
		ginkgo.DeferCleanup(func(ctx context.Context) { f.DeletePods(ctx) })
	})

	// groupPod is a pod of a Kueue pod group, created up front and gated.
	groupPod := func(ctx context.Context, group, name string) *v1.Pod {
		return f.CreatePod(ctx, wrappers.MakePod(name, f.Namespace).Requests("cpu", "1", "memory", "64Mi").
			PriorityClass(priority).NodeSelector(nodes.ManagedLabel, "true").
			Gated(wrappers.KueueAdmissionGate).Label(wrappers.KueuePodGroupLabel, group))
	}
	// provision creates what Kueue creates for attempt n of a workload's
	// check: the PodTemplate of its pod set (the workload's, merged with
	// the flavor's node selector) and the request, both owned by the
	// Workload, with the config's parameters.
	provision := func(ctx context.Context, w *unstructured.Unstructured, n, count int, more map[string]provv1.Parameter) *provv1.ProvisioningRequest {
		name := wrappers.KueueRequestName(w.GetName(), kueueCheck, n)
		tmpl := wrappers.MakePodTemplate(wrappers.KueuePodTemplateName(name, "main"), f.Namespace).
			Requests("cpu", "1", "memory", "64Mi").PriorityClass(priority).NodeSelector(nodes.ManagedLabel, "true").OwnedByWorkload(w)
		e.template(ctx, tmpl)
		params := map[string]provv1.Parameter{}
		for k, v := range kueueConfig {
			params[k] = v
		}
		for k, v := range more {
			params[k] = v
		}
		pr := wrappers.MakeProvisioningRequest(name, f.Namespace, provv1.ClassCheckCapacity).PodSet(tmpl.Name, int32(count)).
			Parameters(params).OwnedByWorkload(w).Obj()
		created, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Create(ctx, pr, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return created
	}

	ginkgo.It("admits a pod group whose gated pods fill the namespace's quota, at the pods' priority, and ignores BookingExpired once admitted", func(ctx ginkgo.SpecContext) {
		ginkgo.By("a namespace quota of 2 CPUs, filled by the group's two gated pods")
		q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "cpu"},
			Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("2")}}}
		_, err := f.Client.CoreV1().ResourceQuotas(f.Namespace).Create(ctx, q, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		framework.Eventually(ctx, func(g gomega.Gomega) {
			q, err := f.Client.CoreV1().ResourceQuotas(f.Namespace).Get(ctx, "cpu", metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(q.Status.Hard).NotTo(gomega.BeEmpty(), "the quota controller has not seen the quota")
		}).Should(gomega.Succeed())
		pods := []*v1.Pod{groupPod(ctx, "group", "group-0"), groupPod(ctx, "group", "group-1")}
		framework.Eventually(ctx, func() string {
			q, err := f.Client.CoreV1().ResourceQuotas(f.Namespace).Get(ctx, "cpu", metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			return q.Status.Used.Name(v1.ResourceRequestsCPU, resource.DecimalSI).String()
		}).Should(gomega.Equal("2"))

		ginkgo.By("the Workload, owned by its pods, and Kueue's PodTemplate and request")
		w, err := workloads.Create(ctx, wrappers.MakeKueueWorkload("group", f.Namespace, pods...), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		pr := provision(ctx, w, 1, 2, nil)
		c := e.waitCondition(ctx, pr.Name, provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		ginkgo.GinkgoWriter.Printf("Provisioned with the quota full of the group's own pods: %s\n", c.Message)
		for _, r := range e.reservations(ctx, pr) {
			gomega.Expect(r.Spec.Template.Priority).To(gomega.HaveValue(gomega.Equal(int32(1000))),
				"booking %s is not held at the priority of the pods' PriorityClass", r.Name)
		}

		ginkgo.By("admitting the workload: each pod gets the request's annotations and loses its gate in one update")
		for _, p := range pods {
			live, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			if live.Annotations == nil {
				live.Annotations = map[string]string{}
			}
			live.Annotations[provv1.AnnotationConsume] = pr.Name
			live.Annotations[provv1.AnnotationProvisioningClassName] = provv1.ClassCheckCapacity
			live.Spec.SchedulingGates = nil
			_, err = f.Client.CoreV1().Pods(f.Namespace).Update(ctx, live, metav1.UpdateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
		}
		booked := map[string]bool{}
		for _, r := range e.reservations(ctx, pr) {
			booked[r.Status.NodeName] = true
		}
		for _, p := range pods {
			framework.Eventually(ctx, func() string { return e.nodeOf(ctx, p.Name) }).Should(gomega.Satisfy(func(n string) bool { return booked[n] }),
				"pod %s did not land on a booked node %v", p.Name, booked)
		}
		ginkgo.By("every pod came: BookingExpired, CapacityBookingConsumed, which Kueue ignores once admitted")
		e.waitCondition(ctx, pr.Name, provv1.ConditionBookingExpired, provisioning.ReasonCapacityBookingConsumed)
		framework.Eventually(ctx, func() int { return e.bookings(ctx, pr) }).Should(gomega.BeZero())
		for _, p := range pods {
			gomega.Expect(e.nodeOf(ctx, p.Name)).NotTo(gomega.BeEmpty(), "pod %s lost its node when the booking ended", p.Name)
		}
		pr = e.get(ctx, pr.Name)
		gomega.Expect(meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionCapacityRevoked)).To(gomega.BeNil())
	})

	ginkgo.It("serves Kueue's next attempt after a Failed one", func(ctx ginkgo.SpecContext) {
		w, err := workloads.Create(ctx, wrappers.MakeKueueWorkload("retried", f.Namespace), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		cpus := 0
		for _, n := range framework.KwokNodes(ctx, 1) {
			cpus += int(n.Status.Allocatable.Cpu().Value())
		}
		ginkgo.By(fmt.Sprintf("attempt 1: %d one-CPU pods, more than the %d CPUs of the kwok nodes, noRetry", cpus+1, cpus))
		first := provision(ctx, w, 1, cpus+1, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
		e.waitCondition(ctx, first.Name, provv1.ConditionFailed, provv1.ReasonCapacityIsNotFound)
		ginkgo.By("attempt 2, as Kueue makes it after its backoff: a new request and PodTemplate, 2 pods")
		second := provision(ctx, w, 2, 2, nil)
		e.waitCondition(ctx, second.Name, provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		gomega.Expect(second.UID).NotTo(gomega.Equal(first.UID))
		gomega.Expect(e.bookings(ctx, first)).To(gomega.BeZero(), "the failed attempt holds bookings")
		booked, _ := e.bookedPods(ctx, second)
		gomega.Expect(booked).To(gomega.Equal(2))
		gomega.Expect(meta.IsStatusConditionTrue(e.get(ctx, first.Name).Status.Conditions, provv1.ConditionFailed)).To(gomega.BeTrue())
	})

	ginkgo.It("sets CapacityRevoked only on a real loss: a booked node that goes is booked again elsewhere", func(ctx ginkgo.SpecContext) {
		ginkgo.By("two kwok nodes of this spec's own, the only ones the pod set may use")
		label := "gantry.dev/e2e-kueue"
		var own []string
		for i, n := range nodes.Topology(2) {
			n.Name = fmt.Sprintf("%s-node-%d", f.Namespace, i)
			n.Labels = map[string]string{label: f.Namespace, v1.LabelHostname: n.Name, v1.LabelOSStable: "linux"}
			_, err := f.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			own = append(own, n.Name)
			ginkgo.DeferCleanup(func(ctx context.Context) { _ = f.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}) })
		}
		framework.Eventually(ctx, func(g gomega.Gomega) {
			for _, name := range own {
				n, err := f.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(isReady(n)).To(gomega.BeTrue(), "node %s not Ready", name)
			}
		}).Should(gomega.Succeed())
		w, err := workloads.Create(ctx, wrappers.MakeKueueWorkload("moved", f.Namespace), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		name := wrappers.KueueRequestName(w.GetName(), kueueCheck, 1)
		tmpl := wrappers.MakePodTemplate(wrappers.KueuePodTemplateName(name, "main"), f.Namespace).
			Requests("cpu", "3").NodeSelector(label, f.Namespace).OwnedByWorkload(w)
		e.template(ctx, tmpl)
		pr := wrappers.MakeProvisioningRequest(name, f.Namespace, provv1.ClassCheckCapacity).PodSet(tmpl.Name, 1).
			Parameters(kueueConfig).OwnedByWorkload(w).Obj()
		pr, err = f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Create(ctx, pr, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		e.waitCondition(ctx, name, provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		lost := e.reservations(ctx, pr)[0].Status.NodeName

		ginkgo.By("deleting the booked node " + lost)
		gomega.Expect(f.Client.CoreV1().Nodes().Delete(ctx, lost, metav1.DeleteOptions{})).To(gomega.Succeed())
		framework.Eventually(ctx, func(g gomega.Gomega) {
			rs := e.reservations(ctx, pr)
			g.Expect(rs).To(gomega.HaveLen(1))
			g.Expect(rs[0].Status.Phase).To(gomega.Equal(schedv1alpha1.ReservationAvailable))
			g.Expect(rs[0].Status.NodeName).NotTo(gomega.Equal(lost))
		}).Should(gomega.Succeed(), "the lost booking was not made again on the other node%s", e.events(ctx, name))
		got := e.get(ctx, name)
		gomega.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, provv1.ConditionProvisioned)).To(gomega.BeTrue())
		gomega.Expect(meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionCapacityRevoked)).To(gomega.BeNil(),
			"CapacityRevoked, which makes Kueue deactivate the workload, after a loss that was booked again")

		ginkgo.By("deleting the other node too: nowhere left, CapacityRevoked")
		other := e.reservations(ctx, pr)[0].Status.NodeName
		gomega.Expect(f.Client.CoreV1().Nodes().Delete(ctx, other, metav1.DeleteOptions{})).To(gomega.Succeed())
		c := e.waitCondition(ctx, name, provv1.ConditionCapacityRevoked, provisioning.ReasonCapacityRevoked)
		ginkgo.GinkgoWriter.Printf("CapacityRevoked: %s\n", c.Message)
	})
})

// installWorkloadCRD installs the minimal Workload CRD unless Kueue's (or
// an earlier spec's) is there, and waits until it is served.
func installWorkloadCRD(ctx context.Context) {
	ginkgo.GinkgoHelper()
	cs := apiextensionsclient.NewForConfigOrDie(framework.TestContext.Config)
	crd := wrappers.KueueWorkloadCRD()
	_, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	dyn := dynamic.NewForConfigOrDie(framework.TestContext.Config)
	framework.Eventually(ctx, func() error {
		_, err := dyn.Resource(workloadsResource).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		return err
	}).Should(gomega.Succeed(), "the Workload CRD is not served")
}

func isReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// get reads the request.
func (e *env) get(ctx context.Context, name string) *provv1.ProvisioningRequest {
	ginkgo.GinkgoHelper()
	pr, err := e.f.Gantry.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).Get(ctx, name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return pr
}
