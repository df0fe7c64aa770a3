package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

var requireOwner = wrappers.MakeMetadataPolicy("require-owner", "ns").Rule(
	policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "owner", Operator: metav1.LabelSelectorOpDoesNotExist}}}},
	policyv1alpha1.PolicyAction{Reject: true}).Obj()

// statusRequest is an update of pod (from old) through pods/status.
func statusRequest(t *testing.T, pod, old *v1.Pod) admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	oldRaw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	return admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, Namespace: pod.Namespace, Name: pod.Name, SubResource: "status",
		Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object:   runtime.RawExtension{Raw: raw}, OldObject: runtime.RawExtension{Raw: oldRaw},
	}
}

func req(r admissionv1.AdmissionRequest) admission.Request {
	return admission.Request{AdmissionRequest: r}
}

func podWithKind(w *wrappers.PodWrapper) *v1.Pod {
	p := w.Obj()
	p.APIVersion, p.Kind = "v1", "Pod"
	return p
}

// Finding 11, webhook deployment: both webhooks reject a pods/status update
// that removes a required label, and allow one that leaves labels alone.
func TestWebhooksGovernStatusMetadata(t *testing.T) {
	s := loadedSource(t, requireOwner)
	reviewer := &metadatapolicy.Reviewer{Source: s, Recorder: record.NewFakeRecorder(10), Deployment: metrics.Webhook}
	owned := podWithKind(wrappers.MakePod("p", "ns").Label("owner", "alice"))
	unowned := podWithKind(wrappers.MakePod("p", "ns"))
	for name, handle := range map[string]func(context.Context, admissionv1.AdmissionRequest) admissionv1.AdmissionResponse{
		"mutate": func(ctx context.Context, r admissionv1.AdmissionRequest) admissionv1.AdmissionResponse {
			return (&Mutator{Reviewer: reviewer}).Handle(ctx, req(r)).AdmissionResponse
		},
		"validate": func(ctx context.Context, r admissionv1.AdmissionRequest) admissionv1.AdmissionResponse {
			return (&Validator{Reviewer: reviewer}).Handle(ctx, req(r)).AdmissionResponse
		},
	} {
		t.Run(name, func(t *testing.T) {
			resp := handle(context.Background(), statusRequest(t, unowned, owned))
			if resp.Allowed || !strings.Contains(resp.Result.Message, "MetadataPolicy ns/require-owner rule 0") {
				t.Errorf("status update removing owner: allowed=%v %v", resp.Allowed, resp.Result)
			}
			// A pod created before the policy: status updates that leave its
			// labels alone pass.
			if resp := handle(context.Background(), statusRequest(t, unowned, unowned)); !resp.Allowed || len(resp.Patch) > 0 {
				t.Errorf("status update leaving the labels alone: allowed=%v patch=%s %v", resp.Allowed, resp.Patch, resp.Result)
			}
		})
	}
}

// Finding 14, webhook deployment: the validating webhook rejects a pod a
// later mutating webhook labelled with a forbidden label.
func TestValidatorRejectsFinalObject(t *testing.T) {
	s := loadedSource(t, wrappers.MakeMetadataPolicy("no-debug", "ns").Rule(
		policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"debug": "true"}}},
		policyv1alpha1.PolicyAction{Reject: true}).Obj())
	v := &Validator{Reviewer: &metadatapolicy.Reviewer{Source: s, Deployment: metrics.Webhook}}
	resp := v.Handle(context.Background(), podRequest(t, podWithKind(wrappers.MakePod("p", "ns").Label("debug", "true")), admissionv1.Create))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "MetadataPolicy ns/no-debug rule 0") {
		t.Errorf("allowed=%v %v, want a rejection naming MetadataPolicy ns/no-debug rule 0", resp.Allowed, resp.Result)
	}
	if resp := v.Handle(context.Background(), podRequest(t, podWithKind(wrappers.MakePod("p", "ns")), admissionv1.Create)); !resp.Allowed {
		t.Errorf("a compliant pod: %v", resp.Result)
	}
}
