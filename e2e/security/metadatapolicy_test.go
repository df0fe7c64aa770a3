package security

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/wrappers"
)

var _ = framework.Describe("MetadataPolicies of a tenant", ginkgo.Label(framework.LabelSecurity, framework.LabelMetadataPolicy), ginkgo.Serial, func() {
	own := framework.NewFramework("security-policy")
	other := framework.NewFramework("security-neighbour")
	var (
		tenant, neighbour *framework.Tenant
		dyn               dynamic.Interface
	)

	ginkgo.BeforeEach(func(ctx ginkgo.SpecContext) {
		tenant = framework.NewTenant(ctx, own.Namespace, "tenant")
		neighbour = framework.NewTenant(ctx, other.Namespace, "neighbour")
		var err error
		dyn, err = dynamic.NewForConfig(tenant.Config)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	})

	// submit writes a policy as the tenant: a ClusterMetadataPolicy when
	// cluster is set, else one of the tenant's namespace.
	submit := func(ctx context.Context, obj any, cluster bool) error {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if cluster {
			_, err = dyn.Resource(metadatapolicy.ClusterMetadataPoliciesResource).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
			return err
		}
		_, err = dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(own.Namespace).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		return err
	}
	ready := func(ctx context.Context, name string) {
		ginkgo.GinkgoHelper()
		framework.Eventually(ctx, func(g gomega.Gomega) {
			u, err := dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(own.Namespace).Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			var p policyv1alpha1.MetadataPolicy
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)).To(gomega.Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(p.Status.Conditions, policyv1alpha1.ConditionReady)).To(gomega.BeTrue(), "policy %s: %v", name, p.Status.Conditions)
		}).Should(gomega.Succeed())
	}
	all := policyv1alpha1.PolicyPredicate{}
	setLabel := func(k, v string) policyv1alpha1.PolicyAction {
		return policyv1alpha1.PolicyAction{UpdatedLabels: map[string]policyv1alpha1.LabelValue{k: policyv1alpha1.LabelValue(v)}}
	}

	// Finding 4: a namespaced policy reached the tenant's own Namespace
	// (pod-security labels) and other cluster-scoped objects.
	ginkgo.It("reaches neither its Namespace, nor nodes, nor another tenant's pods", func(ctx ginkgo.SpecContext) {
		for _, resource := range []string{"namespaces", "nodes"} {
			p := wrappers.MakeMetadataPolicy("escalate-"+resource, own.Namespace).Rule(all, setLabel("pod-security.kubernetes.io/enforce", "privileged"))
			p.Spec.Targets = &policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Group: "", Resource: resource}}}
			err := submit(ctx, p.Obj(), false)
			gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "%s: want 422 Invalid, got %v", resource, err)
		}
		err := submit(ctx, wrappers.MakeClusterMetadataPolicy(own.Namespace+"-everywhere").Rule(all, setLabel("owned", "yes")).Obj(), true)
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "a tenant created a ClusterMetadataPolicy: %v", err)

		ginkgo.By("writing, in the tenant's namespace, a policy that labels and rejects every pod")
		gomega.Expect(submit(ctx, wrappers.MakeMetadataPolicy("greedy", own.Namespace).
			Rule(all, setLabel("owned", "yes")).
			Rule(all, policyv1alpha1.PolicyAction{Reject: true}).Obj(), false)).To(gomega.Succeed())
		ready(ctx, "greedy")
		_, err = tenant.Client.CoreV1().Pods(own.Namespace).Create(ctx, wrappers.MakePod("mine", own.Namespace).Obj(), metav1.CreateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "the policy is not in effect in its own namespace: %v", err)

		ginkgo.By("creating the neighbour's pod: untouched")
		p, err := neighbour.Client.CoreV1().Pods(other.Namespace).Create(ctx, wrappers.MakePod("theirs", other.Namespace).Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(p.Labels).NotTo(gomega.HaveKey("owned"))
		ns, err := own.Client.CoreV1().Namespaces().Get(ctx, own.Namespace, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(ns.Labels).NotTo(gomega.HaveKey("pod-security.kubernetes.io/enforce"))
	})

	// Findings 7 and 23: conflict analysis was quadratic with a string per
	// pair, and a rejection listed every rejecting policy.
	ginkgo.It("keeps admission quick and its answers bounded with 1000 conflicting policies", func(ctx ginkgo.SpecContext) {
		const n = 1000
		ginkgo.By(fmt.Sprintf("writing %d policies that each set the same label to its own value and reject pods lacking another", n))
		start := time.Now()
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		work := make(chan int)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					p := wrappers.MakeMetadataPolicy(fmt.Sprintf("p-%04d", i), own.Namespace).
						Rule(all, setLabel("team", fmt.Sprintf("v-%04d", i))).
						Rule(policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
							{Key: "approved", Operator: metav1.LabelSelectorOpDoesNotExist}}}}, policyv1alpha1.PolicyAction{Reject: true})
					if err := submit(ctx, p.Obj(), false); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		gomega.Expect(errs).To(gomega.BeEmpty())
		ginkgo.GinkgoWriter.Printf("%d policies written in %s\n", n, time.Since(start).Round(time.Millisecond))
		ready(ctx, fmt.Sprintf("p-%04d", n-1))

		pods := tenant.Client.CoreV1().Pods(own.Namespace)
		start = time.Now()
		_, err := pods.Create(ctx, wrappers.MakePod("unapproved", own.Namespace).Obj(), metav1.CreateOptions{})
		took := time.Since(start)
		ginkgo.GinkgoWriter.Printf("a pod all %d policies reject: refused in %s with %d bytes of message\n", n, took.Round(time.Millisecond), len(errText(err)))
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "want Forbidden, got %v", err)
		gomega.Expect(len(errText(err))).To(gomega.BeNumerically("<", 16<<10), "the rejection is not bounded")
		gomega.Expect(took).To(gomega.BeNumerically("<", quickRejection))

		start = time.Now()
		p, err := pods.Create(ctx, wrappers.MakePod("approved", own.Namespace).Label("approved", "yes").Obj(), metav1.CreateOptions{})
		took = time.Since(start)
		ginkgo.GinkgoWriter.Printf("a pod all %d policies label: admitted in %s\n", n, took.Round(time.Millisecond))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(p.Labels).To(gomega.HaveKeyWithValue("team", "v-0000"), "the earliest policy by name wins")
		gomega.Expect(took).To(gomega.BeNumerically("<", quickRejection))
	})
})
