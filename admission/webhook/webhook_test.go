package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// loadedSource is a source holding the given policies, ready.
func loadedSource(t *testing.T, policies ...*policyv1alpha1.MetadataPolicy) *metadatapolicy.Source {
	t.Helper()
	s := metadatapolicy.NewSourceForTest()
	for _, p := range policies {
		c, errs := engine.CompileNamespaced(p)
		if errs != nil {
			t.Fatal(errs)
		}
		s.AddForTest(c)
	}
	return s
}

func podRequest(t *testing.T, pod *v1.Pod, op admissionv1.Operation) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Namespace: pod.Namespace, Name: pod.Name,
		Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object:   runtime.RawExtension{Raw: raw},
	}}
}

func mutator(s *metadatapolicy.Source) *Mutator {
	return &Mutator{Reviewer: &metadatapolicy.Reviewer{Source: s, Recorder: record.NewFakeRecorder(10), Deployment: metrics.Webhook}}
}

func TestMutatorAnnotatesQoSAndAppliesPolicies(t *testing.T) {
	s := loadedSource(t, wrappers.MakeMetadataPolicy("route", "ns").Rule(
		policyv1alpha1.PolicyPredicate{AnnotationSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"scheduler.alpha.kubernetes.io/qos": "BestEffort"}}},
		policyv1alpha1.PolicyAction{SchedulerName: "gantry-best-effort", UpdatedLabels: map[string]policyv1alpha1.LabelValue{"tier": "be"}},
	).Obj())
	pod := wrappers.MakePod("p", "ns").Obj()
	resp := mutator(s).Handle(context.Background(), podRequest(t, pod, admissionv1.Create))
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	got := map[string]any{}
	for _, p := range resp.Patches {
		got[p.Path] = p.Value
	}
	// The QoS annotation the policy selects on is set by the same request.
	for _, want := range []string{"/metadata/annotations", "/metadata/labels", "/spec/schedulerName"} {
		if _, ok := got[want]; !ok {
			t.Errorf("no patch of %s in %v", want, resp.Patches)
		}
	}
	if got["/spec/schedulerName"] != "gantry-best-effort" {
		t.Errorf("schedulerName patch = %v", got["/spec/schedulerName"])
	}
}

func TestMutatorRejectsWithoutPatch(t *testing.T) {
	s := loadedSource(t, wrappers.MakeMetadataPolicy("deny", "ns").
		Rule(policyv1alpha1.PolicyPredicate{}, policyv1alpha1.PolicyAction{Reject: true}).Obj())
	pod := wrappers.MakePod("p", "ns").Requests("cpu", "1").Obj()
	resp := mutator(s).Handle(context.Background(), podRequest(t, pod, admissionv1.Create))
	if resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("want a denial without patches, got allowed=%v patches=%v", resp.Allowed, resp.Patches)
	}
	if resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, "rejected by MetadataPolicy ns/deny rule 0") {
		t.Errorf("result = %+v", resp.Result)
	}
}

func TestPolicyValidatorNamesTheField(t *testing.T) {
	p := map[string]any{"apiVersion": "policy.gantry.dev/v1alpha1", "kind": "MetadataPolicy",
		"metadata": map[string]any{"name": "bad", "namespace": "ns"},
		"spec":     map[string]any{"rules": []any{map[string]any{"policyAction": map[string]any{"updatedLabels": map[string]any{"not a key": "v"}}}}}}
	raw, _ := json.Marshal(p)
	resp := PolicyValidator{}.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
	if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(resp.Result.Message, "spec.rules[0].policyAction.updatedLabels[not a key]") {
		t.Errorf("response = allowed %v, %+v", resp.Allowed, resp.Result)
	}
}

// A tenant's MetadataPolicy targeting its own Namespace (or any
// cluster-scoped resource) is rejected by the webhook's validate-policy path.
func TestPolicyValidatorRejectsClusterScopedTargets(t *testing.T) {
	for _, resource := range []string{"namespaces", "nodes"} {
		p := map[string]any{"apiVersion": "policy.gantry.dev/v1alpha1", "kind": "MetadataPolicy",
			"metadata": map[string]any{"name": "escalate", "namespace": "team-a"},
			"spec": map[string]any{
				"targets": map[string]any{"resources": []any{map[string]any{"group": "", "resource": resource}}},
				"rules":   []any{map[string]any{"policyAction": map[string]any{"updatedLabels": map[string]any{"role": "monitoring"}}}}}}
		raw, _ := json.Marshal(p)
		resp := PolicyValidator{}.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
		if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity ||
			!strings.Contains(resp.Result.Message, "spec.targets.resources[0]") {
			t.Errorf("%s: response = allowed %v, %+v", resource, resp.Allowed, resp.Result)
		}
	}
}
