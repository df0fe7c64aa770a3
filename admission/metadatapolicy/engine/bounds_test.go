package engine

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Finding 7: every policy of the review's hostile shape gets at most
// MaxConflictMessages conflicts and a line saying there are more.
func TestConflictsCappedPerPolicy(t *testing.T) {
	policies := hostilePolicies(t, 50)
	got := Conflicts(policies, func(string) (map[string]string, bool) { return nil, true })
	if len(got) != len(policies) {
		t.Fatalf("conflicts for %d policies, want %d", len(got), len(policies))
	}
	for p, msgs := range got {
		if len(msgs) != MaxConflictMessages+1 {
			t.Fatalf("%s: %d messages, want %d: %q", p.ID(), len(msgs), MaxConflictMessages+1, msgs)
		}
		if last := msgs[MaxConflictMessages]; !strings.HasPrefix(last, "and more") {
			t.Errorf("%s: last message %q does not say there are more", p.ID(), last)
		}
		for _, m := range msgs[:MaxConflictMessages] {
			if !strings.HasPrefix(m, "label k: MetadataPolicy tenant/") {
				t.Errorf("%s: message %q", p.ID(), m)
			}
		}
	}
}

// Writes of one value never conflict, however many policies make them.
func TestConflictsOneValueIsFree(t *testing.T) {
	var policies []*Policy
	for i := range 100 {
		policies = append(policies, nsPolicy("tenant", fmt.Sprintf("p-%03d", i)).rule(everything, setLabels("k", "v")).compile(t))
	}
	if got := Conflicts(policies, func(string) (map[string]string, bool) { return nil, true }); len(got) != 0 {
		t.Errorf("conflicts = %v, want none", got)
	}
}

// The conflicts audit annotation of one request is bounded in length
// whatever the number of conflicting rules and the length of their values,
// and says how many conflicts it leaves out.
func TestConflictSummaryBounded(t *testing.T) {
	long := strings.Repeat("x", 4000)
	var policies []*Policy
	for i := range 50 {
		spec := policyv1alpha1.MetadataPolicySpec{}
		for r := range policyv1alpha1.MaxRules {
			spec.Rules = append(spec.Rules, policyv1alpha1.MetadataPolicyRule{PolicyAction: policyv1alpha1.PolicyAction{
				UpdatedAnnotations: map[string]policyv1alpha1.AnnotationValue{"k": policyv1alpha1.AnnotationValue(fmt.Sprintf("%s-%d-%d", long, i, r))},
				SchedulerName:      "other-scheduler",
			}})
		}
		p, errs := CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p-%02d", i)}, Spec: spec})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		policies = append(policies, p)
	}
	Sort(policies)
	d := Evaluate(policies, pod("tenant", policyv1alpha1.Update))
	const bound = MaxReported*(MaxReportedItemBytes+len("...")+len("; ")) + len("and 1000000 more")
	total := 50*policyv1alpha1.MaxRules - 1
	summary := d.Enforced.ConflictSummary()
	if len(summary) > bound {
		t.Errorf("conflict summary is %d bytes, want at most %d", len(summary), bound)
	}
	if want := fmt.Sprintf("; and %d more", total-MaxReported); !strings.HasSuffix(summary, want) {
		t.Errorf("conflict summary does not end with %q: ...%s", want, summary[max(0, len(summary)-80):])
	}
	if len(d.Enforced.Conflicts) != MaxReported || d.Enforced.MoreConflicts != total-MaxReported {
		t.Errorf("kept %d conflicts and counted %d more, want %d and %d", len(d.Enforced.Conflicts), d.Enforced.MoreConflicts, MaxReported, total-MaxReported)
	}
	ignored := d.Enforced.IgnoredSummary()
	if len(ignored) > bound || !strings.HasSuffix(ignored, fmt.Sprintf("; and %d more", 50*policyv1alpha1.MaxRules-MaxReported)) {
		t.Errorf("ignored summary is %d bytes (bound %d): ...%s", len(ignored), bound, ignored[max(0, len(ignored)-80):])
	}
}

// Past its comparison budget the analysis stops, and every policy it may
// not have finished says so rather than claiming no conflict.
func TestConflictsBudget(t *testing.T) {
	old := maxOverlapChecks
	maxOverlapChecks = 3
	t.Cleanup(func() { maxOverlapChecks = old })
	var policies []*Policy
	for i := range 10 {
		policies = append(policies, nsPolicy("tenant", fmt.Sprintf("p-%02d", i)).rule(everything, setLabels("k", fmt.Sprintf("v%d", i))).compile(t))
	}
	got := Conflicts(policies, func(string) (map[string]string, bool) { return nil, true })
	for _, p := range policies {
		msgs := got[p]
		if len(msgs) == 0 || !strings.HasPrefix(msgs[len(msgs)-1], "conflict analysis stopped after 3 comparisons") {
			t.Errorf("%s: %q, want a last message saying the analysis stopped", p.ID(), msgs)
		}
	}
}
