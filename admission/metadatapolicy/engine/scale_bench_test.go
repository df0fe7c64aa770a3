package engine

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// scaleSizes are the sizes the scaled benchmarks run at: a cost per item
// (ns/item) that stays flat from 10 to 2000 is linear growth; one that grows
// with the size is super-linear.
var scaleSizes = []int{10, 100, 1000, 2000}

// reportPerItem reports the time per operation divided by n.
func reportPerItem(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/item")
}

// selectorOf is a selector of n requirements ("k-i In [v-i, x]"), which a
// pod labelled by labelsOf(n) matches.
func selectorOf(n int) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	for i := range n {
		s.MatchExpressions = append(s.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: fmt.Sprintf("k-%d", i), Operator: metav1.LabelSelectorOpIn, Values: []string{fmt.Sprintf("v-%d", i), "x"}})
	}
	return s
}

func labelsOf(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("k-%d", i)] = fmt.Sprintf("v-%d", i)
	}
	return m
}

// predicatePolicy is one policy of MaxRules rules, each with a label
// selector of n requirements, setting a label of its own.
func predicatePolicy(b testing.TB, n int) *Policy {
	spec := policyv1alpha1.MetadataPolicySpec{}
	for r := range policyv1alpha1.MaxRules {
		spec.Rules = append(spec.Rules, policyv1alpha1.MetadataPolicyRule{
			PolicyPredicate: policyv1alpha1.PolicyPredicate{LabelSelector: selectorOf(n)},
			PolicyAction:    setLabels(fmt.Sprintf("out-%d", r), "v"),
		})
	}
	p, errs := CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "p"}, Spec: spec})
	if errs != nil {
		b.Fatal(errs)
	}
	return p
}

// BenchmarkScaled prints the cost of the engine's tenant-reachable
// computations at sizes 10, 100, 1000 and 2000:
//   - evaluate/policies=N: one pod against N policies of MaxRules rules
//     that all write one key (the review's hostile shape);
//   - evaluate/predicates=N: one pod against one policy whose MaxRules rules
//     each have N selector requirements, all matching;
//   - conflicts/policies=N: the conflict analysis RunStatus runs after a
//     policy change, over the N hostile policies;
//   - compile/rules=N and compile/predicates=N: compiling (and rejecting,
//     past MaxRules) a policy of N rules, or of one rule with N requirements.
func BenchmarkScaled(b *testing.B) {
	noLabels := func(string) (map[string]string, bool) { return nil, true }
	for _, n := range scaleSizes {
		policies := hostilePolicies(b, n)
		b.Run(fmt.Sprintf("evaluate/policies=%d", n), func(b *testing.B) {
			obj := pod("tenant", policyv1alpha1.Create)
			for b.Loop() {
				Evaluate(policies, obj)
			}
			reportPerItem(b, n)
		})
		b.Run(fmt.Sprintf("conflicts/policies=%d", n), func(b *testing.B) {
			for b.Loop() {
				Conflicts(policies, noLabels)
			}
			reportPerItem(b, n)
		})
	}
	for _, n := range scaleSizes {
		policy := []*Policy{predicatePolicy(b, n)}
		b.Run(fmt.Sprintf("evaluate/predicates=%d", n), func(b *testing.B) {
			obj := pod("tenant", policyv1alpha1.Create)
			obj.Labels = labelsOf(n)
			var d *Decision
			for b.Loop() {
				d = Evaluate(policy, obj)
			}
			if len(d.Enforced.Writes) != policyv1alpha1.MaxRules {
				b.Fatalf("%d writes, want every rule to match", len(d.Enforced.Writes))
			}
			reportPerItem(b, n)
		})
	}
	for _, n := range scaleSizes {
		rules := policyv1alpha1.MetadataPolicySpec{}
		for r := range n {
			rules.Rules = append(rules.Rules, policyv1alpha1.MetadataPolicyRule{PolicyAction: setLabels(fmt.Sprintf("k-%d", r), "v")})
		}
		b.Run(fmt.Sprintf("compile/rules=%d", n), func(b *testing.B) {
			obj := &policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "p"}, Spec: rules}
			for b.Loop() {
				CompileNamespaced(obj)
			}
			reportPerItem(b, n)
		})
		preds := policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{
			PolicyPredicate: policyv1alpha1.PolicyPredicate{LabelSelector: selectorOf(n)},
			PolicyAction:    reject,
		}}}
		b.Run(fmt.Sprintf("compile/predicates=%d", n), func(b *testing.B) {
			obj := &policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "p"}, Spec: preds}
			for b.Loop() {
				CompileNamespaced(obj)
			}
			reportPerItem(b, n)
		})
	}
}
