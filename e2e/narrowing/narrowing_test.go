package narrowing

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

const (
	zoneKey = v1.LabelTopologyZone
	typeKey = v1.LabelInstanceTypeStable
	gate    = "gantry.dev/queue"
)

// queuedPod is a queued workload pod: gated (or not), admitted to every zone.
func queuedPod(ns, name string, gated bool) *v1.Pod {
	p := wrappers.MakePod(name, ns).Label("app", "queued").Toleration("gantry.dev/spot").RequiredTerms(wrappers.Term(wrappers.In(zoneKey, nodes.Zones...)))
	if gated {
		p.Gated(gate)
	}
	return p.Obj()
}

func terms(ts ...v1.NodeSelectorTerm) []v1.NodeSelectorTerm { return ts }

// narrow replaces the pod's required terms, drops its tolerations if asked,
// and removes its gate if ungate: one update, as a queue controller does.
func narrow(ctx context.Context, f *framework.Framework, name string, newTerms []v1.NodeSelectorTerm, dropTolerations, ungate bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		wrappers.SetRequiredTerms(p, newTerms...)
		if dropTolerations {
			p.Spec.Tolerations = nil
		}
		if ungate {
			p.Spec.SchedulingGates = nil
		}
		_, err = f.Client.CoreV1().Pods(f.Namespace).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

var _ = framework.Describe("Gated placement narrowing", ginkgo.Label(framework.LabelNarrowing), func() {
	f := framework.NewFramework("narrowing")
	ginkgo.BeforeEach(func() { framework.RequireGantryAPIServer("gated placement narrowing") })

	ginkgo.It("is served by a patched kube-apiserver", func(ctx ginkgo.SpecContext) {
		v, err := f.Client.Discovery().ServerVersion()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(v.GitVersion).To(gomega.MatchRegexp(`\+gantry\.[0-9a-f]{12}(\.dirty)?\.patched$`))
	})

	ginkgo.It("lets a queue controller narrow and ungate in one update, and the scheduler honours the narrowing", func(ctx ginkgo.SpecContext) {
		narrowings := map[string][]v1.NodeSelectorTerm{
			// A value removed from In.
			"one-zone": terms(wrappers.Term(wrappers.In(zoneKey, "zone-b"))),
			// The term split in two narrower terms, each also pinned to an instance type.
			"split": terms(
				wrappers.Term(wrappers.In(zoneKey, "zone-a"), wrappers.In(typeKey, "gantry.standard-8")),
				wrappers.Term(wrappers.In(zoneKey, "zone-c"), wrappers.In(typeKey, "gantry.highmem-8")),
			),
			// In replaced by a narrower In plus an exclusion.
			"exclude": terms(wrappers.Term(wrappers.In(zoneKey, "zone-a", "zone-c"),
				v1.NodeSelectorRequirement{Key: typeKey, Operator: v1.NodeSelectorOpNotIn, Values: []string{"gantry.standard-4"}})),
		}
		for name := range narrowings {
			_, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, queuedPod(f.Namespace, name, true), metav1.CreateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
		}
		ginkgo.By("checking the gated pods stay unscheduled")
		gomega.Consistently(ctx, func(g gomega.Gomega) {
			list, err := f.Client.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			for _, p := range list.Items {
				g.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "gated pod %s was bound", p.Name)
			}
		}).WithTimeout(util.ConsistentDuration).WithPolling(util.Interval).Should(gomega.Succeed())

		ginkgo.By("narrowing, dropping tolerations and ungating each pod in one update")
		for name, t := range narrowings {
			gomega.Expect(narrow(ctx, f, name, t, true, true)).To(gomega.Succeed(), "narrowing %s", name)
		}

		ginkgo.By("checking each pod runs on a node its narrowed affinity admits")
		for name := range narrowings {
			var p *v1.Pod
			framework.Eventually(ctx, func(g gomega.Gomega) {
				var err error
				p, err = f.Client.CoreV1().Pods(f.Namespace).Get(ctx, name, metav1.GetOptions{})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(p.Status.Phase).To(gomega.Equal(v1.PodRunning))
			}).Should(gomega.Succeed(), "pod %s", name)
			node, err := f.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			ok, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(node)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(ok).To(gomega.BeTrue(), "pod %s runs on %s (%s, %s), outside its narrowed affinity",
				name, node.Name, node.Labels[zoneKey], node.Labels[typeKey])
			for _, tol := range p.Spec.Tolerations {
				// DefaultTolerationSeconds re-adds its not-ready/unreachable ones.
				gomega.Expect(tol.Key).NotTo(gomega.Equal("gantry.dev/spot"), "pod %s kept the dropped toleration", name)
			}
		}
	})

	ginkgo.It("rejects a widening of a gated pod with an explained 422", func(ctx ginkgo.SpecContext) {
		_, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, queuedPod(f.Namespace, "widen", true), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		err = narrow(ctx, f, "widen", terms(wrappers.Term(wrappers.In(zoneKey, "zone-a", "zone-d"))), false, false)
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring(
			"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"))
		gomega.Expect(err.Error()).To(gomega.ContainSubstring(
			fmt.Sprintf("term 0 admits %s=zone-d, which no previous term admits", zoneKey)))

		ginkgo.By("checking a merge of terms is rejected too, old term by old term")
		gomega.Expect(narrow(ctx, f, "widen", terms(wrappers.Term(wrappers.In(zoneKey, "zone-a")), wrappers.Term(wrappers.In(zoneKey, "zone-b"))), false, false)).To(gomega.Succeed())
		err = narrow(ctx, f, "widen", terms(wrappers.Term(wrappers.In(zoneKey, "zone-a", "zone-b"))), false, false)
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("not contained in any single previous term"))

		ginkgo.By("checking nothing was changed by the rejected updates")
		p, err := f.Client.CoreV1().Pods(f.Namespace).Get(ctx, "widen", metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(
			gomega.Equal(terms(wrappers.Term(wrappers.In(zoneKey, "zone-a")), wrappers.Term(wrappers.In(zoneKey, "zone-b")))))
		gomega.Expect(p.Spec.SchedulingGates).To(gomega.HaveLen(1))
	})

	ginkgo.It("keeps upstream's rules for pods without scheduling gates", func(ctx ginkgo.SpecContext) {
		_, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, queuedPod(f.Namespace, "running", false), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		err = narrow(ctx, f, "running", terms(wrappers.Term(wrappers.In(zoneKey, "zone-a"))), false, false)
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "narrowing a non-gated pod: want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("pod updates may not change fields"))

		err = narrow(ctx, f, "running", terms(wrappers.Term(wrappers.In(zoneKey, nodes.Zones...))), true, false)
		gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "dropping a toleration of a non-gated pod: want 422 Invalid, got %v", err)
		gomega.Expect(err.Error()).To(gomega.ContainSubstring("existing toleration can not be modified"))
	})
})

// The probe docs/install.md gives a controller that must tell, without
// trusting the version string, whether its API server narrows: a dry-run
// update that removes one value of a gated pod's In expression. Gantry's
// kube-apiserver accepts it; upstream's (the stock control plane) refuses
// it as an invalid change.
var _ = framework.Describe("Telling whether the API server narrows", ginkgo.Label(framework.LabelNarrowing), func() {
	f := framework.NewFramework("narrowing-probe")

	ginkgo.It("answers the dry-run probe of docs/install.md as the control plane it is", func(ctx ginkgo.SpecContext) {
		p, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, queuedPod(f.Namespace, "probe", true), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		wrappers.SetRequiredTerms(p, wrappers.Term(wrappers.In(zoneKey, nodes.Zones[1:]...)))
		_, err = f.Client.CoreV1().Pods(f.Namespace).Update(ctx, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if framework.TestContext.ControlPlane == cluster.ControlPlaneStock {
			gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "upstream's kube-apiserver answered the narrowing probe with %v", err)
			return
		}
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "Gantry's kube-apiserver refused the narrowing probe")
	})
})
