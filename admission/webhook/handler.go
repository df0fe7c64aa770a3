// Package webhook is gantry-webhook: the QoS annotator and MetadataPolicy as
// admission webhooks, for clusters whose kube-apiserver cannot be replaced.
// It runs the same engine and review logic as the in-process plugins.
package webhook

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	"github.com/gantry-dev/gantry/admission/qos"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Paths the server serves.
const (
	MutatePath = "/mutate"
	// ValidatePath re-checks the enforced reject rules on the object as it
	// will be stored, after every mutating webhook ran.
	ValidatePath       = "/validate"
	ValidatePolicyPath = "/validate-policy"
)

// readyWait bounds how long a request waits for policies to load. It stays
// below the webhooks' timeoutSeconds (5 in config/webhooks.yaml), so that
// while policies load the client sees ErrNotReady rather than a timeout.
const readyWait = 3 * time.Second

// Mutator annotates pods with their QoS class, then applies MetadataPolicies.
type Mutator struct {
	Reviewer *metadatapolicy.Reviewer
}

var _ admission.Handler = &Mutator{}

// Handle implements admission.Handler. An update through the status
// subresource is reviewed as an update of the object when it changes labels
// or annotations; other subresources are left to Validator.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	defer metrics.Observe(metadatapolicy.PluginName, metrics.Webhook, start)
	if req.SubResource != "" && req.SubResource != "status" {
		return admission.Allowed("")
	}
	obj, subject, err := review(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if subject == nil {
		return admission.Allowed("")
	}
	changed := false
	if subject.Pod && req.SubResource == "" {
		var pod v1.Pod
		if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if class := string(v1qos.ComputePodQOS(&pod)); pod.Annotations[qos.Annotation] != class {
			obj.SetAnnotations(metadatapolicy.Merge(obj.GetAnnotations(), map[string]string{qos.Annotation: class}))
			subject.Annotations = obj.GetAnnotations()
			changed = true
		}
	}
	if !waitReady(ctx, m.Reviewer.Source) {
		metrics.Decisions.WithLabelValues(metrics.ResultError, metrics.Webhook).Inc()
		return admission.Errored(http.StatusServiceUnavailable, metadatapolicy.ErrNotReady)
	}
	reviewer := m.Reviewer
	if req.DryRun != nil && *req.DryRun {
		reviewer = reviewer.WithoutEvents()
	}
	res, err := reviewer.Review(ctx, subject, metadatapolicy.Describe(req.Kind.Kind, req.Namespace, nameOf(req, obj), subject.Operation))
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	var resp admission.Response
	switch {
	case res != nil && res.Rejection != "":
		resp = admission.Denied(res.Rejection)
	case res != nil && res.Changed():
		obj.SetLabels(metadatapolicy.Merge(obj.GetLabels(), res.Labels))
		obj.SetAnnotations(metadatapolicy.Merge(obj.GetAnnotations(), res.Annotations))
		if res.SchedulerName != "" {
			if err := unstructured.SetNestedField(obj.Object, res.SchedulerName, "spec", "schedulerName"); err != nil {
				return admission.Errored(http.StatusInternalServerError, err)
			}
		}
		changed = true
	}
	if resp.AdmissionResponse.Result == nil {
		if changed {
			patched, err := json.Marshal(obj.Object)
			if err != nil {
				return admission.Errored(http.StatusInternalServerError, err)
			}
			resp = admission.PatchResponseFromRaw(req.Object.Raw, patched)
		} else {
			resp = admission.Allowed("")
		}
	}
	if res != nil {
		resp.AuditAnnotations = res.AuditAnnotations
	}
	return resp
}

// Validator re-checks the enforced reject rules on the object as it will be
// stored, after every mutating webhook (reinvoked ones included) ran: a
// rejection holds whatever mutated the object after Mutator. It also checks
// updates through any subresource that change labels or annotations.
type Validator struct {
	Reviewer *metadatapolicy.Reviewer
}

var _ admission.Handler = &Validator{}

// Handle implements admission.Handler.
func (v *Validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	_, subject, err := review(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if subject == nil {
		return admission.Allowed("")
	}
	if !waitReady(ctx, v.Reviewer.Source) {
		return admission.Errored(http.StatusServiceUnavailable, metadatapolicy.ErrNotReady)
	}
	rejection, err := v.Reviewer.Recheck(ctx, subject)
	switch {
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, err)
	case rejection != "":
		return admission.Denied(rejection)
	}
	return admission.Allowed("")
}

// review decodes the request's object and returns what the engine sees of
// it, or a nil subject when policies do not review the request: policy
// objects, operations other than CREATE and UPDATE, objects without a
// namespace (a Namespace is reviewed as itself), and subresource updates
// that leave labels and annotations unchanged.
func review(req admission.Request) (*unstructured.Unstructured, *engine.Object, error) {
	if req.Resource.Group == policyv1alpha1.GroupName || req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil, nil, nil
	}
	isNamespace := req.Resource.Group == "" && req.Resource.Resource == "namespaces" && req.SubResource == ""
	ns := req.Namespace
	if isNamespace {
		ns = req.Name
	}
	if ns == "" {
		return nil, nil, nil
	}
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(req.Object.Raw, &obj.Object); err != nil {
		return nil, nil, err
	}
	op := policyv1alpha1.Operation(req.Operation)
	if req.SubResource != "" {
		if len(req.OldObject.Raw) == 0 || obj.GetKind() != req.Kind.Kind || req.Kind.Kind == "Scale" {
			return nil, nil, nil // not the object itself: a Binding, an Eviction, a Scale
		}
		old := &unstructured.Unstructured{}
		if err := json.Unmarshal(req.OldObject.Raw, &old.Object); err != nil {
			return nil, nil, err
		}
		if maps.Equal(old.GetLabels(), obj.GetLabels()) && maps.Equal(old.GetAnnotations(), obj.GetAnnotations()) {
			return nil, nil, nil
		}
		op = policyv1alpha1.Update // as a change of the object
	}
	subject := &engine.Object{
		Operation:   op,
		Resource:    policyv1alpha1.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource},
		Namespace:   ns,
		Labels:      obj.GetLabels(),
		Annotations: obj.GetAnnotations(),
		Pod:         req.Resource.Group == "" && req.Resource.Resource == "pods",
	}
	if isNamespace {
		subject.NamespaceLabels = obj.GetLabels()
		if subject.NamespaceLabels == nil {
			subject.NamespaceLabels = map[string]string{}
		}
	}
	return obj, subject, nil
}

func nameOf(req admission.Request, obj *unstructured.Unstructured) string {
	if req.Name != "" {
		return req.Name
	}
	if n := obj.GetName(); n != "" {
		return n
	}
	return obj.GetGenerateName() + "*"
}

func waitReady(ctx context.Context, s *metadatapolicy.Source) bool {
	if s.Ready() {
		return true
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, readyWait, true, func(context.Context) (bool, error) {
		return s.Ready(), nil
	})
	return err == nil
}

// PolicyValidator rejects MetadataPolicies and ClusterMetadataPolicies that
// do not compile, naming the fields.
type PolicyValidator struct{}

var _ admission.Handler = PolicyValidator{}

// Handle implements admission.Handler.
func (PolicyValidator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update || req.SubResource != "" {
		return admission.Allowed("")
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(req.Object.Raw, &u.Object); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if _, errs := metadatapolicy.Compile(u); errs != nil {
		resp := admission.Denied(errs.ToAggregate().Error())
		resp.Result.Code = http.StatusUnprocessableEntity
		resp.Result.Reason = metav1.StatusReasonInvalid
		return resp
	}
	return admission.Allowed("")
}
