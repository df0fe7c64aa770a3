package metadatapolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// A tenant's many conflicting policies (enforced and audit) leave one
// request with bounded audit annotations and at most MaxReported events.
func TestReviewBoundsAuditAnnotationsAndEvents(t *testing.T) {
	s := NewSourceForTest()
	for i := range 60 {
		spec := policyv1alpha1.MetadataPolicySpec{}
		if i%2 == 1 {
			spec.Enforcement = policyv1alpha1.Audit
		}
		for r := range policyv1alpha1.MaxRules {
			spec.Rules = append(spec.Rules, policyv1alpha1.MetadataPolicyRule{PolicyAction: policyv1alpha1.PolicyAction{
				UpdatedLabels: map[string]policyv1alpha1.LabelValue{fmt.Sprintf("k%d", r): policyv1alpha1.LabelValue(fmt.Sprintf("v-%d-%d", i, r))},
			}})
		}
		p, errs := engine.CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p-%02d", i)}, Spec: spec})
		if errs != nil {
			t.Fatal(errs)
		}
		s.AddForTest(p)
	}
	recorder := record.NewFakeRecorder(1000)
	r := &Reviewer{Source: s, Recorder: recorder, Deployment: metrics.InProcess}
	res, err := r.Review(context.Background(), &engine.Object{Operation: policyv1alpha1.Create,
		Resource: policyv1alpha1.GroupResource{Resource: "pods"}, Namespace: "tenant", Pod: true}, "Pod tenant/p (create)")
	if err != nil {
		t.Fatal(err)
	}
	const bound = engine.MaxReported*(engine.MaxReportedItemBytes+len("...")+len("; ")) + len("sets and 1000000 more")
	for _, key := range []string{AuditKeyConflicts, AuditKeyAudit} {
		v, ok := res.AuditAnnotations[key]
		if !ok || len(v) > bound || !strings.Contains(v, " more") {
			t.Errorf("audit annotation %s: %d bytes (bound %d), present %v: ...%s", key, len(v), bound, ok, v[max(0, len(v)-80):])
		}
	}
	if n := len(recorder.Events); n != engine.MaxReported {
		t.Errorf("%d events for one request, want %d", n, engine.MaxReported)
	}
}
