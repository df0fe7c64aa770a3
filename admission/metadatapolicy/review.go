package metadatapolicy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Audit annotation names, without prefix: the in-process plugin prefixes
// them with "metadatapolicy.gantry.dev/", the API server prefixes a
// webhook's with the webhook's name.
const (
	AuditKeyAudit     = "audit"
	AuditKeyConflicts = "conflicts"
	AuditKeyIgnored   = "ignored"
)

// ErrNotReady is returned while policies are still being loaded.
var ErrNotReady = errors.New("MetadataPolicy is not yet ready to handle requests: policies are still being loaded")

// Reviewer is the admission logic both deployments share: it evaluates an
// object against the policies of its namespace, reports audit findings and
// conflicts, counts decisions, and returns what to change.
type Reviewer struct {
	Source *Source
	// NamespaceLabels returns a namespace's labels, for cluster policies
	// with namespace selectors.
	NamespaceLabels func(ctx context.Context, namespace string) (map[string]string, error)
	// Recorder records audit events on the matching Audit policies.
	Recorder record.EventRecorder
	// Deployment labels the metrics: metrics.InProcess or metrics.Webhook.
	Deployment string
}

// WithoutEvents returns a reviewer that records no events, for dry-run
// requests, which must have no side effects.
func (r *Reviewer) WithoutEvents() *Reviewer {
	c := *r
	c.Recorder = nil
	return &c
}

// Result is a review's outcome.
type Result struct {
	// Rejection is non-empty when the object is rejected: it names every
	// rejecting policy and rule.
	Rejection string
	// Labels, Annotations and SchedulerName are what to set; nil or empty
	// when nothing changes.
	Labels, Annotations map[string]string
	SchedulerName       string
	// AuditAnnotations are unprefixed audit annotations for the API
	// server's audit log.
	AuditAnnotations map[string]string
}

func (r *Result) audit(key, value string) {
	if r.AuditAnnotations == nil {
		r.AuditAnnotations = map[string]string{}
	}
	r.AuditAnnotations[key] = value
}

// Changed reports whether the object must be mutated.
func (r *Result) Changed() bool {
	return len(r.Labels) > 0 || len(r.Annotations) > 0 || r.SchedulerName != ""
}

// Review decides obj; what names it in events ("Pod ns/name (create)").
// It returns nil when no policy applies in the namespace.
func (r *Reviewer) Review(ctx context.Context, obj *engine.Object, what string) (*Result, error) {
	policies := r.Source.Policies(obj.Namespace)
	if len(policies) == 0 {
		return nil, nil
	}
	if obj.NamespaceLabels == nil && needsNamespaceLabels(policies) {
		nsLabels, err := r.NamespaceLabels(ctx, obj.Namespace)
		if err != nil {
			metrics.Decisions.WithLabelValues(metrics.ResultError, r.Deployment).Inc()
			return nil, fmt.Errorf("MetadataPolicy: reading namespace %s: %w", obj.Namespace, err)
		}
		obj.NamespaceLabels = nsLabels
	}
	d := engine.Evaluate(policies, obj)
	res := &Result{}
	r.report(d, what, res)
	if d.Enforced.Rejected() {
		metrics.Decisions.WithLabelValues(metrics.ResultRejected, r.Deployment).Inc()
		res.Rejection = d.Enforced.RejectionMessage()
		return res, nil
	}
	res.Labels, res.Annotations, res.SchedulerName = d.Enforced.Changes(obj)
	result := metrics.ResultAdmitted
	if res.Changed() {
		result = metrics.ResultMutated
	}
	metrics.Decisions.WithLabelValues(result, r.Deployment).Inc()
	return res, nil
}

// Recheck decides obj against the enforced reject rules only, for the
// validating phase: it returns the rejection message, or "" when the object
// may be stored. It records no event and no audit annotation (Review did,
// in the mutating phase).
func (r *Reviewer) Recheck(ctx context.Context, obj *engine.Object) (string, error) {
	policies := r.Source.Policies(obj.Namespace)
	if len(policies) == 0 {
		return "", nil
	}
	if obj.NamespaceLabels == nil && needsNamespaceLabels(policies) {
		nsLabels, err := r.NamespaceLabels(ctx, obj.Namespace)
		if err != nil {
			metrics.Decisions.WithLabelValues(metrics.ResultError, r.Deployment).Inc()
			return "", fmt.Errorf("MetadataPolicy: reading namespace %s: %w", obj.Namespace, err)
		}
		obj.NamespaceLabels = nsLabels
	}
	d := engine.Evaluate(policies, obj)
	if !d.Enforced.Rejected() {
		return "", nil
	}
	metrics.Decisions.WithLabelValues(metrics.ResultRejected, r.Deployment).Inc()
	return d.Enforced.RejectionMessage(), nil
}

// report fills the audit annotations for audit findings, conflicts and
// ignored writes, and records an event on each matching Audit policy.
func (r *Reviewer) report(d *engine.Decision, what string, res *Result) {
	if len(d.Audited.Matched) > 0 {
		summary := d.Audited.Summary()
		res.audit(AuditKeyAudit, summary)
		metrics.Decisions.WithLabelValues(metrics.ResultAudited, r.Deployment).Inc()
		reason := "AuditWouldMutate"
		if d.Audited.Rejected() {
			reason = "AuditWouldReject"
		}
		// One event per matching Audit policy, for at most MaxReported
		// policies: a tenant's many policies must not turn each request
		// into as many event writes.
		seen := map[*engine.Policy]bool{}
		for _, m := range d.Audited.Matched {
			if len(seen) >= engine.MaxReported {
				break
			}
			if !seen[m.Policy] && r.Recorder != nil {
				seen[m.Policy] = true
				r.Recorder.Eventf(policyRef(m.Policy), v1.EventTypeNormal, reason, "%s: %s", what, summary)
			}
		}
	}
	if len(d.Enforced.Conflicts) > 0 {
		res.audit(AuditKeyConflicts, d.Enforced.ConflictSummary())
		metrics.Decisions.WithLabelValues(metrics.ResultConflict, r.Deployment).Inc()
	}
	if len(d.Enforced.Ignored) > 0 {
		res.audit(AuditKeyIgnored, d.Enforced.IgnoredSummary())
	}
}

func policyRef(p *engine.Policy) *v1.ObjectReference {
	return &v1.ObjectReference{
		APIVersion: policyv1alpha1.SchemeGroupVersion.String(), Kind: p.Kind,
		Namespace: p.Namespace, Name: p.Name, UID: p.UID,
	}
}

func needsNamespaceLabels(ps []*engine.Policy) bool {
	for _, p := range ps {
		if p.HasNamespaceSelector() {
			return true
		}
	}
	return false
}

// Merge sets from's entries in into, allocating into when needed.
func Merge(into, from map[string]string) map[string]string {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = make(map[string]string, len(from))
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

// Describe names an object for events: "Pod ns/name (create)".
func Describe(kind, namespace, name string, op policyv1alpha1.Operation) string {
	return fmt.Sprintf("%s %s/%s (%s)", kind, namespace, name, strings.ToLower(string(op)))
}

// NamespaceLabelReader reads namespace labels from an informer's lister,
// falling back to the API for a namespace created a moment ago.
type NamespaceLabelReader struct {
	Lister corev1listers.NamespaceLister
	Client kubernetes.Interface
}

// Labels returns a namespace's labels (Reviewer.NamespaceLabels).
func (r NamespaceLabelReader) Labels(ctx context.Context, name string) (map[string]string, error) {
	ns, err := r.Lister.Get(name)
	if apierrors.IsNotFound(err) {
		var live *v1.Namespace
		if live, err = r.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
			return live.Labels, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return ns.Labels, nil
}

// Cached returns a namespace's labels from the informer only, and whether it
// knew the namespace (for RunStatus's conflict analysis).
func (r NamespaceLabelReader) Cached(name string) (map[string]string, bool) {
	ns, err := r.Lister.Get(name)
	if err != nil {
		return nil, false
	}
	return ns.Labels, true
}
