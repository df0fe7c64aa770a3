package webhook

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/test/wrappers"
)

const (
	latencyPolicies = 100
	latencyRounds   = 3
	latencyPods     = 100 // per round and deployment
)

type target struct {
	name      string
	client    kubernetes.Interface
	namespace string
	samples   []time.Duration
	// baseline is the same cluster's "off" target the ratios compare to.
	baseline *target
}

// This measures, in one run, pod create latency with Gantry's admission off,
// in-process and as a webhook, each with latencyPolicies MetadataPolicies in
// the namespace. It prints figures and ratios and asserts nothing about time.
var _ = framework.Describe("Admission latency", ginkgo.Label(framework.LabelMetadataPolicy, framework.LabelLatency), func() {
	ginkgo.It("is measured for pod creates with the plugins off, in-process and as a webhook", func(ctx ginkgo.SpecContext) {
		tc := framework.TestContext
		ginkgo.By("bringing up a second cluster, with the in-process plugins")
		inProcess, err := cluster.New(&cluster.Options{
			Root: tc.Root, Name: "gantry-latency", Nodes: 3, Timeout: 3 * time.Minute, Out: ginkgo.GinkgoWriter,
			WorkDir:        filepath.Join(tc.Root, "_output", "cluster-gantry-latency"),
			KubeconfigPath: filepath.Join(tc.Root, "_output", "kubeconfig-gantry-latency"),
		})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(inProcess.Up(ctx)).To(gomega.Succeed())
		ginkgo.DeferCleanup(func(ctx context.Context) error { return inProcess.Down(ctx) })
		cfgA, err := inProcess.RESTConfig()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		clientA := kubernetes.NewForConfigOrDie(cfgA)

		// Each deployment is compared with "off" on its own cluster: on the
		// in-process cluster, a namespace without policies (the plugin returns
		// at once); on the webhook cluster, a namespace the webhook skips.
		offA := &target{name: "off (A)", client: clientA, namespace: prepare(ctx, clientA, nil, "latency-off-a", false)}
		offB := &target{name: "off (B)", client: tc.Client, namespace: prepare(ctx, tc.Client, dynamic.NewForConfigOrDie(tc.Config), "latency-off-b", true)}
		targets := []*target{
			offA,
			{name: "in-process", client: clientA, namespace: prepare(ctx, clientA, dynamic.NewForConfigOrDie(cfgA), "latency-in-process", false), baseline: offA},
			offB,
			{name: "webhook", client: tc.Client, namespace: prepare(ctx, tc.Client, dynamic.NewForConfigOrDie(tc.Config), "latency-webhook", false), baseline: offB},
		}
		for round := range latencyRounds {
			for _, t := range targets {
				for i := range latencyPods {
					p := wrappers.MakePod(fmt.Sprintf("p-%d-%d", round, i), t.namespace).Label("app", "app-0").Obj()
					start := time.Now()
					_, err := t.client.CoreV1().Pods(t.namespace).Create(ctx, p, metav1.CreateOptions{})
					t.samples = append(t.samples, time.Since(start))
					gomega.Expect(err).NotTo(gomega.HaveOccurred())
				}
			}
		}
		report := fmt.Sprintf("pod create latency, %d creates each, %d MetadataPolicies per namespace; A: in-process cluster, B: webhook cluster\n%-12s %10s %10s %10s %10s %10s\n",
			len(targets[0].samples), latencyPolicies, "admission", "p50", "p99", "vs off p50", "vs off p99", "added p99")
		for _, t := range targets {
			p50, p99 := percentile(t.samples, 50), percentile(t.samples, 99)
			line := fmt.Sprintf("%-12s %10s %10s", t.name, p50.Round(time.Microsecond), p99.Round(time.Microsecond))
			if b := t.baseline; b != nil {
				b50, b99 := percentile(b.samples, 50), percentile(b.samples, 99)
				line += fmt.Sprintf(" %9.2fx %9.2fx %10s", float64(p50)/float64(b50), float64(p99)/float64(b99), (p99 - b99).Round(time.Microsecond))
			}
			report += line + "\n"
		}
		ginkgo.AddReportEntry("admission latency", report)
		fmt.Fprint(ginkgo.GinkgoWriter, report)
		_, _ = fmt.Print(report)
	})
})

// prepare makes a namespace with latencyPolicies policies (none when dyn is
// nil), one of which matches the measured pods, and waits until they are in
// effect (skip: the namespace bypasses the webhook; its policies are then
// never consulted).
func prepare(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, name string, skip bool) string {
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if skip {
		ns.Labels = map[string]string{skipWebhookLabel: "true"}
	}
	_, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) error {
		return c.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	framework.WaitForDefaultServiceAccount(ctx, c, name)
	if dyn == nil {
		return name // no policies
	}
	for i := range latencyPolicies {
		p := wrappers.MakeMetadataPolicy(fmt.Sprintf("policy-%03d", i), name).Rule(
			policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", i)}}},
			policyv1alpha1.PolicyAction{UpdatedLabels: map[string]policyv1alpha1.LabelValue{"team": policyv1alpha1.LabelValue(fmt.Sprintf("team-%d", i))}},
		).Obj()
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		_, err = dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(name).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	if skip {
		return name
	}
	framework.Eventually(ctx, func(g gomega.Gomega) {
		list, err := dyn.Resource(metadatapolicy.MetadataPoliciesResource).Namespace(name).List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		for _, u := range list.Items {
			var p policyv1alpha1.MetadataPolicy
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)).To(gomega.Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(p.Status.Conditions, policyv1alpha1.ConditionReady)).To(gomega.BeTrue(), "policy %s", p.Name)
		}
	}).Should(gomega.Succeed())
	// The policies apply: a probe pod gets the label.
	probe, err := c.CoreV1().Pods(name).Create(ctx, wrappers.MakePod("probe", name).Label("app", "app-0").Obj(), metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(probe.Labels).To(gomega.HaveKeyWithValue("team", "team-0"))
	return name
}

func percentile(samples []time.Duration, p int) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
