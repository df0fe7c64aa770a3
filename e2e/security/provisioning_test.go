package security

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/test/util"
	utilgomega "github.com/gantry-dev/gantry/test/util/gomega"
	"github.com/gantry-dev/gantry/test/wrappers"
)

var _ = framework.Describe("ProvisioningRequests of a tenant", ginkgo.Label(framework.LabelSecurity, framework.LabelProvisioning), ginkgo.Serial, func() {
	f := framework.NewFramework("security-provisioning")
	other := framework.NewFramework("security-neighbour")
	var (
		tenant    *framework.Tenant
		neighbour *framework.Tenant // of other's namespace, made by neighbourRequest
		cpus      int               // of all kwok nodes together
	)

	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		tenant = framework.NewTenant(ctx, f.Namespace, "tenant")
		neighbour = nil
		cpus = 0
		for _, n := range framework.KwokNodes(ctx, 2) {
			cpus += int(n.Status.Allocatable.Cpu().Value())
		}
		ginkgo.DeferCleanup(func(ctx context.Context) {
			f.DeletePods(ctx)
			other.DeletePods(ctx)
		})
		// Specs book whole nodes: start from a cluster without bookings.
		framework.ExpectIdle(ctx, framework.KwokNodes(ctx, 2), func(g gomega.Gomega) {
			list, err := f.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(list.Items).To(gomega.BeEmpty(), "reservations left by an earlier spec")
		})
	})

	// template and request act as the tenant.
	template := func(ctx context.Context, t *wrappers.PodTemplateWrapper) {
		ginkgo.GinkgoHelper()
		t.Namespace = f.Namespace
		_, err := tenant.Client.CoreV1().PodTemplates(f.Namespace).Create(ctx, t.Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	request := func(ctx context.Context, r *wrappers.ProvisioningRequestWrapper) *provv1.ProvisioningRequest {
		ginkgo.GinkgoHelper()
		pr, err := tenant.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Create(ctx, r.Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Delete(ctx, pr.Name, metav1.DeleteOptions{})
		})
		return pr
	}
	checkCapacity := func(name, tmpl string, count int32) *wrappers.ProvisioningRequestWrapper {
		return wrappers.MakeProvisioningRequest(name, f.Namespace, provv1.ClassCheckCapacity).PodSet(tmpl, count)
	}
	waitCondition := func(ctx context.Context, name, typ, reason string) *metav1.Condition {
		ginkgo.GinkgoHelper()
		pr := utilgomega.Must(util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, f.Gantry, f.Namespace, name, typ, metav1.ConditionTrue, reason))
		return meta.FindStatusCondition(pr.Status.Conditions, typ)
	}
	bookings := func(ctx context.Context, pr *provv1.ProvisioningRequest) []schedv1alpha1.Reservation {
		ginkgo.GinkgoHelper()
		list, err := f.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + string(pr.UID)})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return list.Items
	}
	priorityClass := func(ctx context.Context, name string, value int32) {
		ginkgo.GinkgoHelper()
		_, err := f.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = f.Client.SchedulingV1().PriorityClasses().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}

	// Finding 8: count up to 2^31 made the provisioner allocate in
	// proportion, or stall.
	ginkgo.It("fails a request for more pods than the provisioner takes, before any work, and keeps serving others", func(ctx ginkgo.SpecContext) {
		template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1"))
		request(ctx, checkCapacity("huge", "workers", 2147483647))
		c := waitCondition(ctx, "huge", provv1.ConditionFailed, provisioning.ReasonTooManyPods)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)

		ginkgo.By("checking the provisioner still books a small request")
		request(ctx, checkCapacity("small", "workers", 1))
		waitCondition(ctx, "small", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
	})

	// Finding 9, as the review reproduced it: a booking for a PodTemplate
	// of priority class value 100000 got priority 0, a priority-10 pod
	// preempted it, and the request went CapacityRevoked (which makes Kueue
	// deactivate the workload).
	ginkgo.It("books at the priority the pods would get, so a lower-priority pod cannot revoke the booking", func(ctx ginkgo.SpecContext) {
		high, low := f.Namespace+"-high", f.Namespace+"-low"
		priorityClass(ctx, high, 100000)
		priorityClass(ctx, low, 10)
		template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1").PriorityClass(high))
		ginkgo.By(fmt.Sprintf("booking all %d CPUs of the cluster for pods of class %s", cpus, high))
		pr := request(ctx, checkCapacity("important", "workers", int32(cpus)))
		waitCondition(ctx, "important", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		booked := bookings(ctx, pr)
		gomega.Expect(booked).NotTo(gomega.BeEmpty())
		for _, r := range booked {
			gomega.Expect(r.Spec.Template.Priority).To(gomega.HaveValue(gomega.Equal(int32(100000))), "booking %s", r.Name)
		}

		ginkgo.By("creating a pod of class " + low + " that needs booked capacity")
		f.CreatePod(ctx, wrappers.MakePod("low", f.Namespace).Requests("cpu", "1").PriorityClass(low))
		gomega.Consistently(ctx, func(g gomega.Gomega) {
			p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, "low", metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "the low-priority pod took booked capacity")
			got, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, pr.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, provv1.ConditionCapacityRevoked)).To(gomega.BeFalse(), util.DescribeProvisioningRequest(got))
			g.Expect(bookings(ctx, pr)).To(gomega.HaveLen(len(booked)))
		}).WithPolling(util.Interval).WithTimeout(10 * time.Second).Should(gomega.Succeed())
	})

	// Bookings are matched by namespace and request: the consume
	// annotation names a request of the pod's own namespace only.
	ginkgo.It("keeps a booking for its namespace: another namespace's pod cannot consume it", func(ctx ginkgo.SpecContext) {
		template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1"))
		ginkgo.By(fmt.Sprintf("booking all %d CPUs of the cluster", cpus))
		request(ctx, checkCapacity("all", "workers", int32(cpus)))
		waitCondition(ctx, "all", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)

		ginkgo.By("creating, as a neighbour tenant, a pod that names the booking")
		neighbour = framework.NewTenant(ctx, other.Namespace, "neighbour")
		p := wrappers.MakePod("thief", other.Namespace).Requests("cpu", "1").Annotation(provv1.AnnotationConsume, "all").NoGrace().Obj()
		_, err := neighbour.Client.CoreV1().Pods(other.Namespace).Create(ctx, p, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.By("creating the tenant's own consumer")
		mine := wrappers.MakePod("consumer", f.Namespace).Requests("cpu", "1").Annotation(provv1.AnnotationConsume, "all").NoGrace().Obj()
		_, err = tenant.Client.CoreV1().Pods(f.Namespace).Create(ctx, mine, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		f.WaitScheduled(ctx, util.LongTimeout, "consumer")
		other.WaitUnschedulable(ctx, "thief")
		gomega.Consistently(ctx, func() string {
			got, err := other.Client.CoreV1().Pods(other.Namespace).Get(ctx, "thief", metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			return got.Spec.NodeName
		}).WithPolling(util.Interval).WithTimeout(util.ConsistentDuration).Should(gomega.BeEmpty(), "another namespace's pod took the booking")
	})

	// Finding 9: a PodTemplate's raw spec.priority passes no admission.
	ginkgo.It("ignores a PodTemplate's raw priority, and refuses a system class outside kube-system", func(ctx ginkgo.SpecContext) {
		template(ctx, wrappers.MakePodTemplate("raw", f.Namespace).Requests("cpu", "1").Priority(2000000000))
		pr := request(ctx, checkCapacity("raw", "raw", 1))
		waitCondition(ctx, "raw", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		for _, r := range bookings(ctx, pr) {
			gomega.Expect(r.Spec.Template.Priority).To(gomega.HaveValue(gomega.BeNumerically("<=", 0)), "booking %s", r.Name)
		}

		template(ctx, wrappers.MakePodTemplate("critical", f.Namespace).Requests("cpu", "1").PriorityClass("system-cluster-critical"))
		pr = request(ctx, checkCapacity("critical", "critical", 1))
		c := waitCondition(ctx, "critical", provv1.ConditionFailed, provisioning.ReasonPriorityClassForbidden)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)
		gomega.Expect(bookings(ctx, pr)).To(gomega.BeEmpty())
	})

	// Finding 10: bookings already held did not count against the quota.
	ginkgo.It("counts outstanding bookings against the namespace's ResourceQuota", func(ctx ginkgo.SpecContext) {
		q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "cpu"},
			Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("2")}}}
		_, err := f.Client.CoreV1().ResourceQuotas(f.Namespace).Create(ctx, q, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1"))
		request(ctx, checkCapacity("first", "workers", 2))
		waitCondition(ctx, "first", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		second := request(ctx, checkCapacity("second", "workers", 1))
		c := waitCondition(ctx, "second", provv1.ConditionFailed, provisioning.ReasonQuotaExceeded)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)
		gomega.Expect(bookings(ctx, second)).To(gomega.BeEmpty())
	})

	// Second review, N4: pods already running, annotated by the tenant to
	// consume a request, stood for the request's pods in its quota check:
	// the namespace held twice its quota.
	ginkgo.It("does not let running pods that name a request shrink its quota check", func(ctx ginkgo.SpecContext) {
		q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "cpu"},
			Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("2")}}}
		_, err := f.Client.CoreV1().ResourceQuotas(f.Namespace).Create(ctx, q, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.By("running 2 pods of 1 CPU, the whole quota, each naming request r1")
		for _, name := range []string{"web-0", "web-1"} {
			p := wrappers.MakePod(name, f.Namespace).Requests("cpu", "1").Annotation(provv1.AnnotationConsume, "r1").NoGrace().Obj()
			framework.Eventually(ctx, func() error {
				// The quota controller may not have counted the quota yet.
				_, err := tenant.Client.CoreV1().Pods(f.Namespace).Create(ctx, p, metav1.CreateOptions{})
				return err
			}).Should(gomega.Succeed())
			f.WaitScheduled(ctx, util.LongTimeout, name)
		}
		template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1"))
		pr := request(ctx, checkCapacity("r1", "workers", 2))
		c := waitCondition(ctx, "r1", provv1.ConditionFailed, provisioning.ReasonQuotaExceeded)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)
		gomega.Expect(c.Message).NotTo(gomega.ContainSubstring("exist already"))
		gomega.Expect(bookings(ctx, pr)).To(gomega.BeEmpty())
	})

	// Second review, N1: best-effort-atomic requests started together, each
	// within the namespace's quota, were all Provisioned: a scale-up in
	// flight held no quota.
	ginkgo.It("holds the quota for its scale-ups in flight: two atomic requests together cannot both pass", func(ctx ginkgo.SpecContext) {
		groupNodes := func(ctx context.Context) []v1.Node {
			list, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=general"})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			return list.Items
		}
		// Registered first, so it runs last: the cluster keeps no node of
		// the spec's (scale-down removes them once unbooked and empty).
		ginkgo.DeferCleanup(func(ctx context.Context) {
			framework.Eventually(ctx, func() int { return len(groupNodes(ctx)) }).Should(gomega.BeZero(), "the spec's nodes were not removed")
		})
		q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "cpu"},
			Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("10")}}}
		_, err := f.Client.CoreV1().ResourceQuotas(f.Namespace).Create(ctx, q, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		// 6 CPUs, on the general node group's nodes only: a new node each.
		template(ctx, wrappers.MakePodTemplate("general", f.Namespace).Requests("cpu", "6").NodeSelector(nodegroups.LabelNodeGroup, "general"))
		ginkgo.By("creating two requests of 6 CPUs at once, under a quota of 10")
		for _, name := range []string{"first", "second"} {
			request(ctx, wrappers.MakeProvisioningRequest(name, f.Namespace, provv1.ClassBestEffortAtomicScaleUp).PodSet("general", 1))
		}
		var provisioned, refused []string
		framework.Eventually(ctx, func(g gomega.Gomega) {
			provisioned, refused = nil, nil
			for _, name := range []string{"first", "second"} {
				pr, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, name, metav1.GetOptions{})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				switch {
				case meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned):
					provisioned = append(provisioned, name)
				case meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionFailed):
					c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionFailed)
					g.Expect(c.Reason).To(gomega.Equal(provisioning.ReasonQuotaExceeded), util.DescribeProvisioningRequest(pr))
					// Refused before it scaled up.
					g.Expect(meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionProvisioned).Reason).To(gomega.Equal(provisioning.ReasonQuotaExceeded), util.DescribeProvisioningRequest(pr))
					refused = append(refused, name)
				}
			}
			g.Expect(provisioned).To(gomega.HaveLen(1))
			g.Expect(refused).To(gomega.HaveLen(1))
		}).Should(gomega.Succeed())
		ginkgo.GinkgoWriter.Printf("provisioned %v, refused on the quota %v\n", provisioned, refused)
		gomega.Expect(groupNodes(ctx)).To(gomega.HaveLen(1), "nodes added for the two requests")
		for _, name := range []string{"first", "second"} {
			gomega.Expect(f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Delete(ctx, name, metav1.DeleteOptions{})).To(gomega.Succeed())
		}
	})

	// Second review, N5: a booking's PodTemplate passed no admission, so a
	// tenant booked nodes its pods may not use.
	ginkgo.It("books only what its namespace's admission would let its pods ask for", func(ctx ginkgo.SpecContext) {
		ginkgo.By("confining the namespace's pods, as an administrator: no toleration of gantry.dev/dedicated")
		policy := "e2e-" + f.Namespace + "-confined"
		adm := f.Client.AdmissionregistrationV1()
		_, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: policy},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				MatchConstraints: &admissionregistrationv1.MatchResources{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": f.Namespace}},
					ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					}}},
				},
				Validations: []admissionregistrationv1.Validation{{
					Expression: `!has(object.spec.tolerations) || object.spec.tolerations.all(t, !has(t.key) || t.key != "gantry.dev/dedicated")`,
					Message:    "this namespace's pods may not tolerate gantry.dev/dedicated",
				}},
			},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) error {
			return adm.ValidatingAdmissionPolicies().Delete(ctx, policy, metav1.DeleteOptions{})
		})
		_, err = adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: policy},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
		}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) error {
			return adm.ValidatingAdmissionPolicyBindings().Delete(ctx, policy, metav1.DeleteOptions{})
		})
		dedicated := wrappers.MakePod("dedicated", f.Namespace).Requests("cpu", "1").Toleration("gantry.dev/dedicated").Obj()
		framework.Eventually(ctx, func() error {
			_, err := tenant.Client.CoreV1().Pods(f.Namespace).Create(ctx, dedicated, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}).ShouldNot(gomega.Succeed(), "the policy refuses the tenant's pod")

		ginkgo.By("asking, as the tenant, for a booking of pods that tolerate it")
		template(ctx, wrappers.MakePodTemplate("dedicated", f.Namespace).Requests("cpu", "1").Toleration("gantry.dev/dedicated"))
		pr := request(ctx, checkCapacity("dedicated", "dedicated", 1))
		c := waitCondition(ctx, "dedicated", provv1.ConditionFailed, provisioning.ReasonPodsNotAdmitted)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)
		gomega.Expect(c.Message).To(gomega.ContainSubstring("this namespace's pods may not tolerate gantry.dev/dedicated"))
		gomega.Expect(bookings(ctx, pr)).To(gomega.BeEmpty())
	})

	// Second review, N10: spec.parameters could be added after creation
	// (processorInstance among them, which moves a request away from the
	// instance that holds its booking).
	ginkgo.It("cannot add parameters to its request after creation", func(ctx ginkgo.SpecContext) {
		template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1"))
		pr := request(ctx, checkCapacity("plain", "workers", 1))
		waitCondition(ctx, "plain", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		booked := bookings(ctx, pr)
		patch := []byte(`{"spec":{"parameters":{"processorInstance":"elsewhere"}}}`)
		_, err := tenant.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Patch(ctx, pr.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("parameters cannot be added or removed after creation"))
		got, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, pr.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(got.Spec.Parameters).To(gomega.BeEmpty())
		gomega.Expect(bookings(ctx, pr)).To(gomega.HaveLen(len(booked)))
	})

	// bookingNames names pr's Reservations with their UIDs.
	bookingNames := func(ctx context.Context, pr *provv1.ProvisioningRequest) []string {
		ginkgo.GinkgoHelper()
		var names []string
		for _, r := range bookings(ctx, pr) {
			names = append(names, r.Name+"@"+string(r.UID))
		}
		return names
	}
	// neighbourRequest books, as a neighbour tenant, 1 pod of 100m in the
	// neighbour namespace, and returns the request once Provisioned with
	// the names of its Reservations.
	neighbourRequest := func(ctx context.Context, name string) (*provv1.ProvisioningRequest, []string) {
		ginkgo.GinkgoHelper()
		if neighbour == nil {
			neighbour = framework.NewTenant(ctx, other.Namespace, "neighbour")
		}
		_, err := neighbour.Client.CoreV1().PodTemplates(other.Namespace).Create(ctx,
			wrappers.MakePodTemplate(name, other.Namespace).Requests("cpu", "100m").Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		pr, err := neighbour.Gantry.AutoscalingXV1().ProvisioningRequests(other.Namespace).Create(ctx,
			wrappers.MakeProvisioningRequest(name, other.Namespace, provv1.ClassCheckCapacity).PodSet(name, 1).Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx context.Context) {
			_ = f.Gantry.AutoscalingXV1().ProvisioningRequests(other.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		})
		utilgomega.Must(util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, f.Gantry, other.Namespace, name,
			provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound))
		names := bookingNames(ctx, pr)
		gomega.Expect(names).NotTo(gomega.BeEmpty(), "the neighbour's request holds no Reservation")
		return pr, names
	}

	// Second review, N2: a request's simulation had no bound on its work,
	// and held the lock every booking takes. The suite's cluster runs the
	// provisioner with a budget a tenant can pass on two nodes (the default
	// is passed only on clusters of thousands of nodes).
	ginkgo.It("fails a request whose simulation passes its work budget, and the neighbour's bookings go on", func(ctx ginkgo.SpecContext) {
		budget := framework.RequireProvisionerArg("simulation-budget", "the default budget is out of a tenant's reach on two nodes")
		ginkgo.By("booking, as a neighbour tenant, before the attack")
		before, held := neighbourRequest(ctx, "before")

		ginkgo.By(fmt.Sprintf("asking, as the tenant, for 200 pods spread over the nodes one by one (budget %s evaluations)", budget))
		spread := wrappers.MakePodTemplate("spread", f.Namespace).Requests("cpu", "10m")
		spread.Template.Labels = map[string]string{"app": "spread"}
		spread.Template.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}},
			// Nodes whose taints the pods do not tolerate (a kind cluster's
			// real nodes, which this suite taints) are no domains: with the
			// default Ignore they would hold the spread at one pod a node.
			NodeTaintsPolicy: ptr.To(v1.NodeInclusionPolicyHonor),
		}}
		template(ctx, spread)
		pr := request(ctx, checkCapacity("spread", "spread", 200))
		ginkgo.By("booking, as the neighbour, during the attack")
		neighbourRequest(ctx, "during")
		c := waitCondition(ctx, "spread", provv1.ConditionFailed, provisioning.ReasonSimulationBudgetExceeded)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)
		gomega.Expect(c.Message).To(gomega.ContainSubstring("budget of " + budget + " filter evaluations"))
		gomega.Expect(c.Message).To(gomega.ContainSubstring("--simulation-budget"))
		gomega.Expect(bookings(ctx, pr)).To(gomega.BeEmpty())

		ginkgo.By("checking the neighbour's earlier booking is the same")
		gomega.Expect(bookingNames(ctx, before)).To(gomega.ConsistOf(held))
		neighbourRequest(ctx, "after")
	})

	// Second review, N2: a namespace's bookings had no cap, and each
	// Reservation costs the scheduler and the status controller work. The
	// suite's cluster caps them at a number a tenant reaches on two nodes
	// (the default is --max-pods-per-request's).
	ginkgo.It("caps the Reservations a namespace's bookings hold, and the neighbour still books", func(ctx ginkgo.SpecContext) {
		limit, err := strconv.Atoi(framework.RequireProvisionerArg("max-bookings-per-namespace", "the default cap is out of a tenant's reach on two nodes"))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		template(ctx, wrappers.MakePodTemplate("small", f.Namespace).Requests("cpu", "100m"))

		ginkgo.By(fmt.Sprintf("asking, as the tenant, for one booking of %d pod sets: more Reservations than the cap alone", limit+1))
		wide := checkCapacity("wide", "small", 1)
		for range limit {
			wide = wide.PodSet("small", 1)
		}
		pr := request(ctx, wide)
		c := waitCondition(ctx, "wide", provv1.ConditionFailed, provisioning.ReasonTooManyBookings)
		ginkgo.GinkgoWriter.Printf("Failed: %s\n", c.Message)
		gomega.Expect(c.Message).To(gomega.ContainSubstring("--max-bookings-per-namespace"))
		gomega.Expect(bookings(ctx, pr)).To(gomega.BeEmpty())

		ginkgo.By(fmt.Sprintf("filling the cap with %d requests of one pod", limit))
		held := 0
		for i := range limit {
			name := fmt.Sprintf("small-%d", i)
			pr := request(ctx, checkCapacity(name, "small", 1))
			waitCondition(ctx, name, provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
			held += len(bookings(ctx, pr))
		}
		gomega.Expect(held).To(gomega.Equal(limit))

		ginkgo.By("asking for one more")
		pr = request(ctx, checkCapacity("over", "small", 1))
		got := utilgomega.Must(util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, f.Gantry, f.Namespace, "over",
			provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound))
		c = meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionProvisioned)
		ginkgo.GinkgoWriter.Printf("Provisioned=False: %s\n", c.Message)
		gomega.Expect(c.Message).To(gomega.ContainSubstring("--max-bookings-per-namespace"))
		gomega.Expect(bookings(ctx, pr)).To(gomega.BeEmpty())

		ginkgo.By("booking, as the neighbour, while the tenant is at its cap")
		neighbourRequest(ctx, "neighbour")
	})

	// Second review, N9: the provisioner cached every PodTemplate of the
	// cluster whole, so its memory grew with what tenants stored. It
	// watches their metadata only, and reads a template whole when a
	// request it serves names it.
	ginkgo.It("keeps no copy of the PodTemplates no request names: storing 128 MiB of them leaves the provisioner's memory where it was", func(ctx ginkgo.SpecContext) {
		var reader cluster.ResidentMemoryReader
		if c := framework.TestContext.Local; c != nil {
			reader, _ = c.Runtime().(cluster.ResidentMemoryReader)
		}
		if reader == nil {
			ginkgo.Skip("the provisioner is not a process of this machine (only the local runtime's are)")
		}
		const templates, envVars, valueBytes = 128, 1000, 1000 // about 1 MiB each
		stored := int64(templates * envVars * valueBytes)
		big := func(i int) string { return fmt.Sprintf("big-%03d", i) }
		ginkgo.By("booking, as a neighbour tenant, before")
		before, held := neighbourRequest(ctx, "before")
		rssBefore := utilgomega.Must(reader.ResidentMemory(provisionerComponent))

		ginkgo.By(fmt.Sprintf("storing, as the tenant, %d PodTemplates of about 1 MiB that no request names", templates))
		value := strings.Repeat("x", valueBytes)
		errs := make([]error, templates)
		workqueue.ParallelizeUntil(ctx, 4, templates, func(i int) {
			pt := wrappers.MakePodTemplate(big(i), f.Namespace).Requests("cpu", "100m").Obj()
			for k := range envVars {
				pt.Template.Spec.Containers[0].Env = append(pt.Template.Spec.Containers[0].Env, v1.EnvVar{Name: fmt.Sprintf("V%04d", k), Value: value})
			}
			_, errs[i] = tenant.Client.CoreV1().PodTemplates(f.Namespace).Create(ctx, pt, metav1.CreateOptions{})
		})
		gomega.Expect(errors.Join(errs...)).NotTo(gomega.HaveOccurred())
		ginkgo.By("asking for a pod of the last one: the provisioner has then seen them all")
		pr := request(ctx, checkCapacity("last", big(templates-1), 1))
		waitCondition(ctx, "last", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		gomega.Expect(bookings(ctx, pr)).To(gomega.HaveLen(1))
		rssAfter := utilgomega.Must(reader.ResidentMemory(provisionerComponent))
		grew := rssAfter - rssBefore
		ginkgo.GinkgoWriter.Printf("gantry-provisioner resident memory: %.1f MiB before, %.1f MiB after %.1f MiB of PodTemplates: grew %.1f MiB\n",
			mib(rssBefore), mib(rssAfter), mib(stored), mib(grew))
		// A copy of every template would take at least what was stored.
		gomega.Expect(grew).To(gomega.BeNumerically("<", stored/2),
			"the provisioner's resident memory grew by %.1f MiB as the tenant stored %.1f MiB of templates", mib(grew), mib(stored))

		ginkgo.By("checking the neighbour's booking is the same, and it books again")
		gomega.Expect(bookingNames(ctx, before)).To(gomega.ConsistOf(held))
		neighbourRequest(ctx, "after")
	})

	// Findings 2 and 13: the provisioner's attempt state and backoff were
	// annotations the tenant could write; ValidUntilSeconds reached 68
	// years.
	ginkgo.It("keeps the provisioner's state out of the tenant's reach and caps the validity", func(ctx ginkgo.SpecContext) {
		gomega.Expect(tenant.Can(ctx, "update", provv1.SchemeGroupVersion.Group, "provisioningrequests", "status", f.Namespace)).To(gomega.BeFalse())
		template(ctx, wrappers.MakePodTemplate("workers", f.Namespace).Requests("cpu", "1"))
		pr := request(ctx, checkCapacity("mine", "workers", 1))
		waitCondition(ctx, "mine", provv1.ConditionProvisioned, provv1.ReasonCapacityIsFound)
		booked := bookings(ctx, pr)

		ginkgo.By("writing the request's status as the tenant")
		got, err := tenant.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, pr.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		got.Status.ProvisioningClassDetails = map[string]provv1.Detail{provisioning.DetailScaleUpAttempt: "forged-1"}
		_, err = tenant.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "want Forbidden, got %v", err)

		ginkgo.By("forging the provisioner's old bookkeeping annotations")
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			provisioning.AnnotationScaleUpAttempt: "forged-1",
			provisioning.AnnotationScaleUpPlan:    "general=1000",
			provisioning.AnnotationScaleUpStarted: "2000-01-01T00:00:00Z",
		}}})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = tenant.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Patch(ctx, pr.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Consistently(ctx, func(g gomega.Gomega) {
			got, err := f.Gantry.AutoscalingXV1().ProvisioningRequests(f.Namespace).Get(ctx, pr.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, provv1.ConditionProvisioned)).To(gomega.BeTrue(), util.DescribeProvisioningRequest(got))
			g.Expect(got.Status.ProvisioningClassDetails).NotTo(gomega.HaveKey(provisioning.DetailScaleUpAttempt))
			g.Expect(bookings(ctx, pr)).To(gomega.HaveLen(len(booked)))
		}).WithPolling(util.Interval).WithTimeout(util.ConsistentDuration).Should(gomega.Succeed())

		ginkgo.By("asking for a validity of 68 years")
		request(ctx, checkCapacity("forever", "workers", 1).Parameter(provv1.ParameterValidUntilSeconds, "2147483647"))
		c := waitCondition(ctx, "forever", provv1.ConditionFailed, provisioning.ReasonInvalidParameter)
		gomega.Expect(c.Message).To(gomega.ContainSubstring("ValidUntilSeconds must be at most"))
	})
})

// provisionerComponent is gantry-provisioner's component name in the
// local runtime.
const provisionerComponent = "gantry-provisioner"

// mib is a size in bytes in MiB.
func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
