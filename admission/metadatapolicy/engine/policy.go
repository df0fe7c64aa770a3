package engine

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Kinds of policies, as they appear in messages.
const (
	KindCluster    = "ClusterMetadataPolicy"
	KindNamespaced = "MetadataPolicy"
)

// NamespaceNameLabel is the label every namespace carries with its name.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// SystemNamespaces are never selected by a ClusterMetadataPolicy unless its
// namespaceSelector names them with an In requirement on NamespaceNameLabel.
var SystemNamespaces = sets.New("kube-system", "kube-public", "kube-node-lease")

// DefaultTargets are what a policy without targets applies to.
var DefaultTargets = policyv1alpha1.Targets{
	Resources:  []policyv1alpha1.GroupResource{{Group: "", Resource: "pods"}},
	Operations: []policyv1alpha1.Operation{policyv1alpha1.Create, policyv1alpha1.Update},
}

// Policy is a compiled MetadataPolicy or ClusterMetadataPolicy.
type Policy struct {
	Kind        string
	Namespace   string // "" for cluster policies
	Name        string
	Generation  int64
	UID         types.UID
	Enforcement policyv1alpha1.EnforcementMode

	resources  sets.Set[policyv1alpha1.GroupResource]
	operations sets.Set[policyv1alpha1.Operation]
	// namespaceSelector is nil for namespaced policies and for cluster
	// policies selecting every namespace.
	namespaceSelector labels.Selector
	// namedNamespaces are the namespaces the selector names with an In
	// requirement on NamespaceNameLabel: only those system namespaces are
	// selectable.
	namedNamespaces sets.Set[string]
	rules           []rule
	// invalid is set on the stand-in of a policy that does not compile
	// (see Invalid): it rejects every request it targets.
	invalid string
}

type rule struct {
	index       int
	labels      labels.Selector
	annotations labels.Selector
	action      policyv1alpha1.PolicyAction
}

// ID names the policy in messages: "ClusterMetadataPolicy/x" or
// "MetadataPolicy ns/x".
func (p *Policy) ID() string {
	if p.Namespace == "" {
		return p.Kind + "/" + p.Name
	}
	return p.Kind + " " + p.Namespace + "/" + p.Name
}

// RuleRef names one rule of one policy.
type RuleRef struct {
	Policy *Policy
	Index  int
}

func (r RuleRef) String() string {
	if r.Index < 0 {
		return fmt.Sprintf("%s, which does not compile (fix or delete it): %s", r.Policy.ID(), r.Policy.invalid)
	}
	return fmt.Sprintf("%s rule %d", r.Policy.ID(), r.Index)
}

// CompileNamespaced compiles a MetadataPolicy.
func CompileNamespaced(p *policyv1alpha1.MetadataPolicy) (*Policy, field.ErrorList) {
	return compile(KindNamespaced, p.Namespace, p.Name, p.Generation, &p.Spec, nil, false)
}

// CompileCluster compiles a ClusterMetadataPolicy.
func CompileCluster(p *policyv1alpha1.ClusterMetadataPolicy) (*Policy, field.ErrorList) {
	return compile(KindCluster, "", p.Name, p.Generation, &p.Spec.MetadataPolicySpec, p.Spec.NamespaceSelector, true)
}

func compile(kind, ns, name string, gen int64, spec *policyv1alpha1.MetadataPolicySpec, nsSel *metav1.LabelSelector, cluster bool) (*Policy, field.ErrorList) {
	specPath := field.NewPath("spec")
	p := &Policy{Kind: kind, Namespace: ns, Name: name, Generation: gen, Enforcement: spec.Enforcement}
	if p.Enforcement == "" {
		p.Enforcement = policyv1alpha1.Enforce
	}
	var errs field.ErrorList
	if p.Enforcement != policyv1alpha1.Enforce && p.Enforcement != policyv1alpha1.Audit {
		errs = append(errs, field.NotSupported(specPath.Child("enforcement"), p.Enforcement, []string{string(policyv1alpha1.Enforce), string(policyv1alpha1.Audit)}))
	}
	targets := DefaultTargets
	if spec.Targets != nil {
		if len(spec.Targets.Resources) > 0 {
			targets.Resources = spec.Targets.Resources
		}
		if len(spec.Targets.Operations) > 0 {
			targets.Operations = spec.Targets.Operations
		}
	}
	p.resources = sets.New(targets.Resources...)
	p.operations = sets.New(targets.Operations...)
	if !cluster {
		for i, gr := range targets.Resources {
			if ClusterScopedResources[gr] {
				errs = append(errs, field.Invalid(specPath.Child("targets", "resources").Index(i), gr,
					"a MetadataPolicy applies to objects in its own namespace only: cluster-scoped resources (namespaces included) need a ClusterMetadataPolicy"))
			}
		}
	}
	for i, gr := range targets.Resources {
		if strings.Contains(gr.Resource, "/") {
			errs = append(errs, field.Invalid(specPath.Child("targets", "resources").Index(i), gr,
				"name the resource, not a subresource: a policy on a resource also governs label and annotation changes made through its subresources (such as pods/status)"))
		}
	}
	for i, op := range targets.Operations {
		if op != policyv1alpha1.Create && op != policyv1alpha1.Update {
			errs = append(errs, field.NotSupported(specPath.Child("targets", "operations").Index(i), op, []string{"CREATE", "UPDATE"}))
		}
	}
	if cluster && nsSel != nil {
		sel, err := metav1.LabelSelectorAsSelector(nsSel)
		if err != nil {
			errs = append(errs, field.Invalid(specPath.Child("namespaceSelector"), nsSel, err.Error()))
		} else {
			p.namespaceSelector = sel
			p.namedNamespaces = namedNamespaces(nsSel)
		}
	}
	if len(spec.Rules) == 0 {
		errs = append(errs, field.Required(specPath.Child("rules"), "a policy needs at least one rule"))
	}
	if len(spec.Rules) > policyv1alpha1.MaxRules {
		errs = append(errs, field.TooMany(specPath.Child("rules"), len(spec.Rules), policyv1alpha1.MaxRules))
	}
	for i := range spec.Rules {
		r, rerrs := compileRule(i, &spec.Rules[i], specPath.Child("rules").Index(i))
		errs = append(errs, rerrs...)
		if len(rerrs) == 0 {
			p.rules = append(p.rules, r)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

func compileRule(i int, r *policyv1alpha1.MetadataPolicyRule, path *field.Path) (rule, field.ErrorList) {
	var errs field.ErrorList
	out := rule{index: i, action: r.PolicyAction, labels: labels.Everything(), annotations: labels.Everything()}
	predPath := path.Child("policyPredicate")
	if s := r.PolicyPredicate.LabelSelector; s != nil {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			errs = append(errs, field.Invalid(predPath.Child("labelSelector"), s, err.Error()))
		} else {
			out.labels = sel
		}
	}
	if s := r.PolicyPredicate.AnnotationSelector; s != nil {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			errs = append(errs, field.Invalid(predPath.Child("annotationSelector"), s, err.Error()))
		} else {
			out.annotations = sel
		}
	}
	a := &r.PolicyAction
	actPath := path.Child("policyAction")
	if a.Reject && (len(a.UpdatedLabels) > 0 || len(a.UpdatedAnnotations) > 0 || a.SchedulerName != "") {
		errs = append(errs, field.Invalid(actPath, "reject", "reject cannot be combined with updatedLabels, updatedAnnotations or schedulerName in one action"))
	}
	if !a.Reject && len(a.UpdatedLabels) == 0 && len(a.UpdatedAnnotations) == 0 && a.SchedulerName == "" {
		errs = append(errs, field.Required(actPath, "an action must reject, or set labels, annotations or schedulerName"))
	}
	for _, k := range sortedKeys(a.UpdatedLabels) {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(actPath.Child("updatedLabels").Key(k), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(string(a.UpdatedLabels[k])) {
			errs = append(errs, field.Invalid(actPath.Child("updatedLabels").Key(k), a.UpdatedLabels[k], msg))
		}
	}
	for _, k := range sortedKeys(a.UpdatedAnnotations) {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(actPath.Child("updatedAnnotations").Key(k), k, msg))
		}
	}
	if a.SchedulerName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(a.SchedulerName) {
			errs = append(errs, field.Invalid(actPath.Child("schedulerName"), a.SchedulerName, msg))
		}
	}
	return out, errs
}

// namedNamespaces returns the namespaces a selector names with In on the
// namespace name label (in matchLabels or matchExpressions).
func namedNamespaces(s *metav1.LabelSelector) sets.Set[string] {
	out := sets.New[string]()
	if v, ok := s.MatchLabels[NamespaceNameLabel]; ok {
		out.Insert(v)
	}
	for _, e := range s.MatchExpressions {
		if e.Key == NamespaceNameLabel && e.Operator == metav1.LabelSelectorOpIn {
			out.Insert(e.Values...)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Sort orders policies as the engine applies them: cluster policies before
// namespaced ones, then by namespace and name.
func Sort(ps []*Policy) {
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if (a.Namespace == "") != (b.Namespace == "") {
			return a.Namespace == ""
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// HasNamespaceSelector reports whether applying the policy needs the labels
// of the object's namespace.
func (p *Policy) HasNamespaceSelector() bool { return p.namespaceSelector != nil }

// MaxInvalidReason bounds the compile errors an invalid policy's stand-in
// quotes in rejections.
const MaxInvalidReason = 512

// Invalid returns the stand-in of a policy that does not compile but has
// reject rules: it applies to the requests the policy targets (as far as its
// targets and namespace selector can be read; every namespace it could
// select otherwise) and rejects them all, naming the policy and why it does
// not compile. A reject rule thus fails closed, for example after an engine
// upgrade that tightens compilation, rather than silently stopping. targets
// and nsSel may be nil; unreadable parts widen the stand-in, never narrow it.
func Invalid(kind, ns, name string, gen int64, enforcement policyv1alpha1.EnforcementMode, targets *policyv1alpha1.Targets, nsSel *metav1.LabelSelector, reason string) *Policy {
	if len(reason) > MaxInvalidReason {
		reason = reason[:MaxInvalidReason] + "..."
	}
	p := &Policy{Kind: kind, Namespace: ns, Name: name, Generation: gen, Enforcement: policyv1alpha1.Enforce, invalid: reason}
	if enforcement == policyv1alpha1.Audit {
		p.Enforcement = policyv1alpha1.Audit
	}
	t := DefaultTargets
	if targets != nil {
		if len(targets.Resources) > 0 {
			t.Resources = targets.Resources
		}
		var ops []policyv1alpha1.Operation
		for _, op := range targets.Operations {
			if op == policyv1alpha1.Create || op == policyv1alpha1.Update {
				ops = append(ops, op)
			}
		}
		if len(ops) > 0 {
			t.Operations = ops
		}
	}
	p.resources = sets.New(t.Resources...)
	p.operations = sets.New(t.Operations...)
	if ns == "" && nsSel != nil {
		if sel, err := metav1.LabelSelectorAsSelector(nsSel); err == nil {
			p.namespaceSelector = sel
			p.namedNamespaces = namedNamespaces(nsSel)
		}
	}
	return p
}

// Invalid reports why the policy does not compile, for the stand-in of an
// invalid policy; "" for a compiled policy.
func (p *Policy) Invalid() string { return p.invalid }
