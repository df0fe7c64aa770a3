package security

import (
	"fmt"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// quickRejection bounds how long kube-apiserver may take to refuse an
// adversarial update, network and admission included. Before finding 1
// was fixed, 400 terms took 5.2 s of CPU and 2000 terms minutes.
const quickRejection = 5 * time.Second

var _ = framework.Describe("Narrowing a gated pod's placement", ginkgo.Label(framework.LabelSecurity, framework.LabelNarrowing), ginkgo.Serial, func() {
	f := framework.NewFramework("security-narrowing")
	// Upstream's kube-apiserver (the stock control plane) has no narrowing
	// check to attack; its own error text for such an update is not bounded.
	ginkgo.BeforeEach(func() { framework.RequireGantryAPIServer("gated placement narrowing") })

	// Finding 1: the narrowing check was cubic in the affinity's size and
	// its error text grew as new × old.
	ginkgo.DescribeTable("refuses an adversarial update of 2000 terms at once, with bounded error text",
		func(ctx ginkgo.SpecContext, build func(m int) (old, new []v1.NodeSelectorTerm)) {
			tenant := framework.NewTenant(ctx, f.Namespace, "tenant")
			const m = 2000
			old, nw := build(m)
			pod := wrappers.MakePod("gated", f.Namespace).Gated("example.com/gate").RequiredTerms(old...).Obj()
			pods := tenant.Client.CoreV1().Pods(f.Namespace)
			created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())

			ginkgo.By(fmt.Sprintf("updating the gated pod from %d to %d required terms, as the tenant", len(old), len(nw)))
			update := created.DeepCopy()
			wrappers.SetRequiredTerms(update, nw...)
			start := time.Now()
			_, err = pods.Update(ctx, update, metav1.UpdateOptions{})
			took := time.Since(start)
			ginkgo.GinkgoWriter.Printf("kube-apiserver answered in %s with %d bytes of error text\n", took.Round(time.Millisecond), len(errText(err)))
			gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "want 422 Invalid, got %v", err)
			gomega.Expect(took).To(gomega.BeNumerically("<", quickRejection), "the check is not bounded")
			gomega.Expect(len(errText(err))).To(gomega.BeNumerically("<", 64<<10), "error text is not bounded")

			ginkgo.By("checking the pod is unchanged")
			got, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(got.ResourceVersion).To(gomega.Equal(created.ResourceVersion))
		},
		// The review's shape: fillers, then two terms the witness search
		// bounced between; every new term is a widening.
		ginkgo.Entry("the review's shape (a widening)", func(m int) (old, nw []v1.NodeSelectorTerm) {
			for range m - 2 {
				old = append(old, wrappers.Term(wrappers.Req("b", v1.NodeSelectorOpExists)))
			}
			old = append(old, wrappers.Term(wrappers.In("a", "other")), wrappers.Term(wrappers.In("a", "other-0")))
			for range m {
				nw = append(nw, wrappers.Term(wrappers.Req("a", v1.NodeSelectorOpExists)))
			}
			return old, nw
		}),
		// Every new term narrows only the last old term: m × m
		// comparisons that all succeed; the budget refuses it as too
		// large to prove.
		ginkgo.Entry("every new term inside the last old one (too large to prove)", func(m int) (old, nw []v1.NodeSelectorTerm) {
			for i := range m - 1 {
				old = append(old, wrappers.Term(wrappers.In("b", fmt.Sprintf("x-%d", i))))
			}
			old = append(old, wrappers.Term(wrappers.Req("a", v1.NodeSelectorOpExists)))
			for i := range m {
				nw = append(nw, wrappers.Term(wrappers.In("a", fmt.Sprintf("v-%d", i))))
			}
			return old, nw
		}),
	)

	// The model: pods/status is the kubelet's (and the scheduler's), not
	// the tenant's.
	ginkgo.It("does not let a tenant write a pod's status", func(ctx ginkgo.SpecContext) {
		tenant := framework.NewTenant(ctx, f.Namespace, "tenant")
		gomega.Expect(tenant.Can(ctx, "update", "", "pods", "status", f.Namespace)).To(gomega.BeFalse())
		p, err := tenant.Client.CoreV1().Pods(f.Namespace).Create(ctx, wrappers.MakePod("p", f.Namespace).Gated("example.com/gate").Obj(), metav1.CreateOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue})
		_, err = tenant.Client.CoreV1().Pods(f.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "want Forbidden, got %v", err)
	})
})

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
