// Package specs holds the MetadataPolicy and QoS annotator e2e specs, shared
// by the in-process suite (e2e/metadatapolicy) and the webhook suite
// (e2e/metadatapolicy/webhook): the same specs prove both deployments.
package specs

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/qos"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// bestEffortProfile is the second scheduler profile of the local cluster
// (kind/config/kube-scheduler.yaml).
const bestEffortProfile = "gantry-best-effort"

func lacks(key string) policyv1alpha1.PolicyPredicate {
	return policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: key, Operator: metav1.LabelSelectorOpDoesNotExist}}}}
}

func labels(kv ...string) map[string]policyv1alpha1.LabelValue {
	m := map[string]policyv1alpha1.LabelValue{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = policyv1alpha1.LabelValue(kv[i+1])
	}
	return m
}

type client struct {
	f   *framework.Framework
	dyn dynamic.Interface
}

// policy is a policy of the spec's namespace.
func (c *client) policy(name string) *wrappers.MetadataPolicyWrapper {
	return wrappers.MakeMetadataPolicy(name, c.f.Namespace)
}

// submit writes a policy through the dynamic client (the policy types are
// not in a typed clientset) and returns the API's answer.
func (c *client) submit(ctx context.Context, p *wrappers.MetadataPolicyWrapper) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p.Obj())
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	_, err = c.dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(c.f.Namespace).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	return err
}

// create writes a policy and waits until the plugin has it in effect: its
// Ready condition is written only after the plugin loaded it.
func (c *client) create(ctx context.Context, p *wrappers.MetadataPolicyWrapper) *policyv1alpha1.MetadataPolicy {
	ginkgo.GinkgoHelper()
	gomega.Expect(c.submit(ctx, p)).To(gomega.Succeed(), "creating policy %s", p.Name)
	var got *policyv1alpha1.MetadataPolicy
	framework.Eventually(ctx, func(g gomega.Gomega) {
		got = c.get(ctx, p.Name)
		g.Expect(apimeta.IsStatusConditionTrue(got.Status.Conditions, policyv1alpha1.ConditionReady)).To(gomega.BeTrue(), "policy %s not Ready: %v", p.Name, got.Status.Conditions)
	}).Should(gomega.Succeed())
	return got
}

func (c *client) get(ctx context.Context, name string) *policyv1alpha1.MetadataPolicy {
	u, err := c.dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(c.f.Namespace).Get(ctx, name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var p policyv1alpha1.MetadataPolicy
	gomega.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)).To(gomega.Succeed())
	return &p
}

func (c *client) createPod(ctx context.Context, p *v1.Pod) (*v1.Pod, error) {
	return c.f.Client.CoreV1().Pods(c.f.Namespace).Create(ctx, p, metav1.CreateOptions{})
}

// Register defines the specs for a deployment, named by its label:
// framework.LabelInProcess or framework.LabelWebhook.
func Register(deployment string) bool {
	return framework.Describe("MetadataPolicy ["+deployment+"]", ginkgo.Label(framework.LabelMetadataPolicy, deployment), func() {
		if deployment == framework.LabelInProcess {
			ginkgo.BeforeEach(func() { framework.RequireGantryAPIServer("MetadataPolicy admission in process") })
		}
		specs()
	})
}

func specs() {
	f := framework.NewFramework("mdp")
	c := &client{f: f}
	ginkgo.BeforeEach(func() {
		var err error
		c.dyn, err = dynamic.NewForConfig(framework.TestContext.Config)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	})

	ginkgo.It("annotates pods with their QoS class", func(ctx ginkgo.SpecContext) {
		for name, p := range map[string]*wrappers.PodWrapper{
			"BestEffort": wrappers.MakePod("besteffort", f.Namespace),
			"Burstable":  wrappers.MakePod("burstable", f.Namespace).Requests("cpu", "100m", "memory", "64Mi"),
			"Guaranteed": guaranteed(wrappers.MakePod("guaranteed", f.Namespace)),
		} {
			created, err := c.createPod(ctx, p.Obj())
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(created.Annotations).To(gomega.HaveKeyWithValue(qos.Annotation, name))
			gomega.Expect(string(created.Status.QOSClass)).To(gomega.Or(gomega.BeEmpty(), gomega.Equal(name)))
		}
	})

	ginkgo.It("defaults a label, stamps annotations and rejects pods lacking a required label", func(ctx ginkgo.SpecContext) {
		c.create(ctx, c.policy("defaults").
			Rule(lacks("tier"), policyv1alpha1.PolicyAction{UpdatedLabels: labels("tier", "standard")}).
			Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedAnnotations: map[string]policyv1alpha1.AnnotationValue{"gantry.dev/stamped-by": "defaults"}}))
		c.create(ctx, c.policy("require-team").
			Rule(lacks("team"), policyv1alpha1.PolicyAction{Reject: true}))

		created, err := c.createPod(ctx, wrappers.MakePod("ok", f.Namespace).Label("team", "a").Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(created.Labels).To(gomega.HaveKeyWithValue("tier", "standard"))
		gomega.Expect(created.Annotations).To(gomega.HaveKeyWithValue("gantry.dev/stamped-by", "defaults"))

		kept, err := c.createPod(ctx, wrappers.MakePod("explicit-tier", f.Namespace).Label("team", "a").Label("tier", "gold").Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(kept.Labels).To(gomega.HaveKeyWithValue("tier", "gold"), "a default must not override an explicit label")

		_, err = c.createPod(ctx, wrappers.MakePod("no-team", f.Namespace).Obj())
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "want 403 Forbidden, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("rejected by MetadataPolicy " + f.Namespace + "/require-team rule 0"))
		_, err = f.Client.CoreV1().Pods(f.Namespace).Get(ctx, "no-team", metav1.GetOptions{})
		gomega.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "a rejected pod must not exist")
	})

	ginkgo.It("rejects a status update that removes a required label, and passes status updates that keep the labels", func(ctx ginkgo.SpecContext) {
		// Gated: nothing else writes the pod's status meanwhile.
		created, err := c.createPod(ctx, wrappers.MakePod("owned", f.Namespace).Label("owner", "alice").Gated("example.com/hold").Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		c.create(ctx, c.policy("require-owner").Rule(lacks("owner"), policyv1alpha1.PolicyAction{Reject: true}))
		pods := f.Client.CoreV1().Pods(f.Namespace)

		created.Status.Conditions = append(created.Status.Conditions, v1.PodCondition{Type: "example.com/Checked", Status: v1.ConditionTrue})
		updated, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "a status update that keeps the labels")

		delete(updated.Labels, "owner")
		_, err = pods.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "want 403 Forbidden, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("rejected by MetadataPolicy " + f.Namespace + "/require-owner rule 0"))
		got, err := pods.Get(ctx, "owned", metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(got.Labels).To(gomega.HaveKeyWithValue("owner", "alice"))
	})

	ginkgo.It("routes BestEffort pods to a second scheduler profile, which schedules them", func(ctx ginkgo.SpecContext) {
		c.create(ctx, c.policy("route-best-effort").
			Rule(policyv1alpha1.PolicyPredicate{AnnotationSelector: &metav1.LabelSelector{MatchLabels: map[string]string{qos.Annotation: "BestEffort"}}},
				policyv1alpha1.PolicyAction{SchedulerName: bestEffortProfile}))
		be, err := c.createPod(ctx, wrappers.MakePod("best-effort", f.Namespace).Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(be.Spec.SchedulerName).To(gomega.Equal(bestEffortProfile))
		gu, err := c.createPod(ctx, guaranteed(wrappers.MakePod("guaranteed", f.Namespace)).Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		// The pod keeps the scheduler it named (the wrappers name Gantry's).
		gomega.Expect(gu.Spec.SchedulerName).To(gomega.Equal(framework.SchedulerName))

		for pod, profile := range map[string]string{"best-effort": bestEffortProfile, "guaranteed": framework.SchedulerName} {
			framework.Eventually(ctx, func(g gomega.Gomega) {
				events, err := f.Client.CoreV1().Events(f.Namespace).List(ctx, metav1.ListOptions{
					FieldSelector: fields.Set{"involvedObject.name": pod, "reason": "Scheduled"}.String()})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(events.Items).NotTo(gomega.BeEmpty())
				g.Expect(events.Items[0].ReportingController).To(gomega.Equal(profile), "pod %s", pod)
			}).Should(gomega.Succeed())
		}
	})

	ginkgo.It("in Audit mode changes nothing but reports", func(ctx ginkgo.SpecContext) {
		c.create(ctx, c.policy("audit").Enforcement(policyv1alpha1.Audit).
			Rule(lacks("team"), policyv1alpha1.PolicyAction{Reject: true}))
		created, err := c.createPod(ctx, wrappers.MakePod("audited", f.Namespace).Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "an Audit policy must not reject")
		gomega.Expect(created.Labels).NotTo(gomega.HaveKey("team"))
		framework.Eventually(ctx, func(g gomega.Gomega) {
			events, err := f.Client.CoreV1().Events(f.Namespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.name": "audit", "reason": "AuditWouldReject"}.String()})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(events.Items).NotTo(gomega.BeEmpty())
			g.Expect(events.Items[0].Message).To(gomega.ContainSubstring("Pod " + f.Namespace + "/audited (create): rejected by MetadataPolicy " + f.Namespace + "/audit rule 0"))
		}).Should(gomega.Succeed())
	})

	ginkgo.It("resolves conflicting writes deterministically and surfaces them as a condition", func(ctx ginkgo.SpecContext) {
		c.create(ctx, c.policy("a-team-x").Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedLabels: labels("team", "x")}))
		c.create(ctx, c.policy("b-team-y").Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedLabels: labels("team", "y")}))
		for _, name := range []string{"a-team-x", "b-team-y"} {
			framework.Eventually(ctx, func(g gomega.Gomega) {
				cond := apimeta.FindStatusCondition(c.get(ctx, name).Status.Conditions, policyv1alpha1.ConditionConflict)
				g.Expect(cond).NotTo(gomega.BeNil())
				g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionTrue))
				g.Expect(cond.Message).To(gomega.ContainSubstring("label team"))
			}).Should(gomega.Succeed(), "policy %s", name)
		}
		created, err := c.createPod(ctx, wrappers.MakePod("contested", f.Namespace).Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(created.Labels).To(gomega.HaveKeyWithValue("team", "x"), "the earlier policy by name wins")
	})

	ginkgo.It("applies a ClusterMetadataPolicy in the namespaces it selects only", func(ctx ginkgo.SpecContext) {
		name := "e2e-" + f.Namespace
		p := wrappers.MakeClusterMetadataPolicy(name).
			NamespaceSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{f.Namespace}}}}).
			Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedLabels: labels("cluster-policy", "applied")}).Obj()
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		res := c.dyn.Resource(metadatapolicy.ClusterMetadataPoliciesResource)
		_, err = res.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) error { return res.Delete(ctx, name, metav1.DeleteOptions{}) })
		framework.Eventually(ctx, func(g gomega.Gomega) {
			got, err := res.Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			var cp policyv1alpha1.ClusterMetadataPolicy
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &cp)).To(gomega.Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(cp.Status.Conditions, policyv1alpha1.ConditionReady)).To(gomega.BeTrue())
		}).Should(gomega.Succeed())

		selected, err := c.createPod(ctx, wrappers.MakePod("selected", f.Namespace).Obj())
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(selected.Labels).To(gomega.HaveKeyWithValue("cluster-policy", "applied"))

		other, err := f.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: f.Namespace + "-other-"}}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) error {
			return f.Client.CoreV1().Namespaces().Delete(ctx, other.Name, metav1.DeleteOptions{})
		})
		framework.WaitForDefaultServiceAccount(ctx, f.Client, other.Name)
		outside, err := f.Client.CoreV1().Pods(other.Name).Create(ctx, wrappers.MakePod("outside", other.Name).Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(outside.Labels).NotTo(gomega.HaveKey("cluster-policy"))
	})

	ginkgo.It("rejects an invalid policy with a message naming the field", func(ctx ginkgo.SpecContext) {
		p := c.policy("invalid").
			Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{Reject: true, UpdatedLabels: labels("a", "b")}).
			Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedLabels: labels("not a key", "b")})
		err := c.submit(ctx, p)
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("spec.rules[0].policyAction"))

		p.Spec.Rules = p.Spec.Rules[1:]
		err = c.submit(ctx, p)
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("spec.rules[0].policyAction.updatedLabels[not a key]"))
	})

	ginkgo.It("rejects a tenant's policy targeting its own Namespace or nodes", func(ctx ginkgo.SpecContext) {
		for _, resource := range []string{"namespaces", "nodes"} {
			p := c.policy("escalate-"+resource).Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{UpdatedLabels: labels("pod-security.kubernetes.io/enforce", "privileged")})
			p.Spec.Targets = &policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Group: "", Resource: resource}}}
			err := c.submit(ctx, p)
			gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "%s: want 422 Invalid, got %v", resource, err)
			gomega.Expect(err.Error()).To(gomega.ContainSubstring("spec.targets.resources[0]"))
		}
	})
}

// guaranteed gives the pod's container limits equal to requests of 100m
// CPU and 64Mi: the Guaranteed QoS class.
func guaranteed(p *wrappers.PodWrapper) *wrappers.PodWrapper {
	return p.Requests("cpu", "100m", "memory", "64Mi").Limits("cpu", "100m", "memory", "64Mi")
}
