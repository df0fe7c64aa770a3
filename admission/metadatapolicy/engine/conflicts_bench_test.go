package engine

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// hostilePolicies is the review's shape (finding 7): n policies in one
// namespace, each with 64 rules writing label k to a value of its own.
func hostilePolicies(b testing.TB, n int) []*Policy {
	b.Helper()
	out := make([]*Policy, 0, n)
	for i := range n {
		spec := policyv1alpha1.MetadataPolicySpec{}
		for r := range policyv1alpha1.MaxRules {
			spec.Rules = append(spec.Rules, policyv1alpha1.MetadataPolicyRule{PolicyAction: setLabels("k", fmt.Sprintf("v-%d-%d", i, r))})
		}
		p, errs := CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p-%04d", i)}, Spec: spec})
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		out = append(out, p)
	}
	Sort(out)
	return out
}

// BenchmarkConflicts prints the cost of the conflict analysis RunStatus does
// after every policy change, at 10, 100 and 1000 hostile policies.
func BenchmarkConflicts(b *testing.B) {
	noLabels := func(string) (map[string]string, bool) { return nil, true }
	for _, n := range []int{10, 100, 1000} {
		policies := hostilePolicies(b, n)
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var msgs int
			for b.Loop() {
				msgs = 0
				for _, m := range Conflicts(policies, noLabels) {
					msgs += len(m)
				}
			}
			b.ReportMetric(float64(msgs)/float64(n), "msgs/policy")
		})
	}
}

// BenchmarkEvaluate prints the cost of deciding one pod against the hostile
// policies, and the length of its conflicts audit annotation.
func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		policies := hostilePolicies(b, n)
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			obj := pod("tenant", policyv1alpha1.Create)
			var annotation string
			for b.Loop() {
				annotation = Evaluate(policies, obj).Enforced.ConflictSummary()
			}
			b.ReportMetric(float64(len(annotation)), "annotation-bytes")
		})
	}
}
