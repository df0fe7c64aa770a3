package engine

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/internal/plant"
)

// Object is what the engine sees of an admission request.
type Object struct {
	Operation policyv1alpha1.Operation
	Resource  policyv1alpha1.GroupResource
	// Namespace is "" for cluster-scoped objects.
	Namespace string
	// NamespaceLabels are the labels of the object's namespace, for
	// ClusterMetadataPolicy namespace selectors.
	NamespaceLabels map[string]string
	Labels          map[string]string
	Annotations     map[string]string
	// Pod marks a pod (core group), whose scheduler a policy may choose.
	Pod bool
}

// Field is what a rule writes: a label, an annotation, or the scheduler.
type Field string

const (
	FieldLabel         Field = "label"
	FieldAnnotation    Field = "annotation"
	FieldSchedulerName Field = "schedulerName"
)

// Write is one key a rule sets.
type Write struct {
	Field Field
	Key   string // "" for schedulerName
	Value string
	By    RuleRef
}

func (w Write) target() string {
	if w.Field == FieldSchedulerName {
		return "spec.schedulerName"
	}
	return string(w.Field) + " " + w.Key
}

// Conflict is two matching rules writing one key with different values; the
// earlier rule in the engine's order wins.
type Conflict struct {
	Winner, Loser Write
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s: %s sets %q, overriding %s which sets %q", c.Winner.target(), c.Winner.By, c.Winner.Value, c.Loser.By, c.Loser.Value)
}

// Outcome is what a set of policies (all enforced, or all audit) decides.
type Outcome struct {
	// Rejections are the matching rules that reject; any rejects the object.
	Rejections []RuleRef
	// Writes are the winning writes, in application order.
	Writes []Write
	// Conflicts are the losing writes, the first MaxReported of them;
	// MoreConflicts counts the others.
	Conflicts     []Conflict
	MoreConflicts int
	// Ignored explains matching writes that do not apply (schedulerName on
	// UPDATE or on other resources), the first MaxReported of them;
	// MoreIgnored counts the others.
	Ignored     []string
	MoreIgnored int
	// Matched are every matching rule.
	Matched []RuleRef
}

// Rejected reports whether the outcome rejects the object.
func (o *Outcome) Rejected() bool { return len(o.Rejections) > 0 }

// RejectionMessage names every rejecting policy and rule.
func (o *Outcome) RejectionMessage() string {
	n := min(len(o.Rejections), MaxReported)
	refs := make([]string, 0, n)
	for _, r := range o.Rejections[:n] {
		refs = append(refs, r.String())
	}
	return "rejected by " + joinCapped(refs, len(o.Rejections), ", ")
}

// MaxReported bounds the items (rejecting rules, writes, conflicts, ignored
// writes) one message or audit annotation lists; the rest are counted ("and
// N more"). MaxReportedItemBytes bounds each item. A request's annotations
// thus stay a few KiB however many policies a tenant creates.
const (
	MaxReported          = 20
	MaxReportedItemBytes = 256
)

// joinCapped joins at most MaxReported items, each clipped to
// MaxReportedItemBytes, and says how many of total it left out.
func joinCapped(items []string, total int, sep string) string {
	items = items[:min(len(items), MaxReported)]
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		if len(it) > MaxReportedItemBytes {
			it = it[:MaxReportedItemBytes] + "..."
		}
		b.WriteString(it)
	}
	if more := total - len(items); more > 0 {
		fmt.Fprintf(&b, "%sand %d more", sep, more)
	}
	return b.String()
}

// ConflictSummary describes the conflicts for the audit annotation: at most
// MaxReported of them, in application order, then how many more there are.
func (o *Outcome) ConflictSummary() string {
	n := min(len(o.Conflicts), MaxReported)
	parts := make([]string, 0, n)
	for _, c := range o.Conflicts[:n] {
		parts = append(parts, c.String())
	}
	return joinCapped(parts, len(o.Conflicts)+o.MoreConflicts, "; ")
}

// IgnoredSummary describes the ignored writes for the audit annotation, as
// ConflictSummary does.
func (o *Outcome) IgnoredSummary() string {
	return joinCapped(o.Ignored, len(o.Ignored)+o.MoreIgnored, "; ")
}

// Changes returns the writes that change the object: values that differ
// from what it carries.
func (o *Outcome) Changes(obj *Object) (labelsOut, annotationsOut map[string]string, schedulerName string) {
	for _, w := range o.Writes {
		switch w.Field {
		case FieldLabel:
			if v, ok := obj.Labels[w.Key]; !ok || v != w.Value {
				if labelsOut == nil {
					labelsOut = map[string]string{}
				}
				labelsOut[w.Key] = w.Value
			}
		case FieldAnnotation:
			if v, ok := obj.Annotations[w.Key]; !ok || v != w.Value {
				if annotationsOut == nil {
					annotationsOut = map[string]string{}
				}
				annotationsOut[w.Key] = w.Value
			}
		case FieldSchedulerName:
			schedulerName = w.Value
		}
	}
	return labelsOut, annotationsOut, schedulerName
}

// Decision is the engine's answer for one object.
type Decision struct {
	// Enforced is the outcome of the Enforce policies: it is applied.
	Enforced Outcome
	// Audited is what the Audit policies would do: it is only reported.
	Audited Outcome
}

// Applies reports whether policy p applies to obj at all: target resource
// and operation, and namespace. A namespaced policy never applies to a
// cluster-scoped object, its own Namespace included.
func (p *Policy) Applies(obj *Object) bool {
	if !p.operations.Has(obj.Operation) || !p.resources.Has(obj.Resource) {
		return false
	}
	if p.Namespace != "" && obj.clusterScoped() {
		return false
	}
	return p.SelectsNamespace(obj.Namespace, obj.NamespaceLabels)
}

// SelectsNamespace reports whether the policy applies to objects in
// namespace ns (with labels nsLabels); "" is a cluster-scoped object.
func (p *Policy) SelectsNamespace(ns string, nsLabels map[string]string) bool {
	if p.Namespace != "" {
		return ns == p.Namespace
	}
	if ns == "" {
		return false // cluster-scoped objects are never selected
	}
	if SystemNamespaces.Has(ns) && !p.namedNamespaces.Has(ns) {
		return false
	}
	if p.namespaceSelector == nil {
		return true
	}
	return p.namespaceSelector.Matches(labels.Set(nsLabels))
}

// Evaluate decides obj against policies, which must be in the engine's order
// (see Sort). It never mutates its inputs.
func Evaluate(policies []*Policy, obj *Object) *Decision {
	d := &Decision{}
	objLabels, objAnnotations := labels.Set(obj.Labels), labels.Set(obj.Annotations)
	// written remembers, per outcome, the first write of every key.
	written := [2]map[string]Write{{}, {}}
	for _, p := range policies {
		if !p.Applies(obj) {
			continue
		}
		out, seen := &d.Enforced, written[0]
		if p.Enforcement == policyv1alpha1.Audit {
			out, seen = &d.Audited, written[1]
		}
		if p.invalid != "" {
			ref := RuleRef{Policy: p, Index: -1}
			out.Matched = append(out.Matched, ref)
			out.Rejections = append(out.Rejections, ref)
			continue
		}
		for i := range p.rules {
			r := &p.rules[i]
			if !r.labels.Matches(objLabels) || !r.annotations.Matches(objAnnotations) {
				continue
			}
			ref := RuleRef{Policy: p, Index: r.index}
			out.Matched = append(out.Matched, ref)
			if r.action.Reject {
				out.Rejections = append(out.Rejections, ref)
				continue
			}
			for _, k := range sortedKeys(r.action.UpdatedLabels) {
				if plant.MetadataPolicy {
					break
				}
				out.write(seen, Write{Field: FieldLabel, Key: k, Value: string(r.action.UpdatedLabels[k]), By: ref})
			}
			for _, k := range sortedKeys(r.action.UpdatedAnnotations) {
				out.write(seen, Write{Field: FieldAnnotation, Key: k, Value: string(r.action.UpdatedAnnotations[k]), By: ref})
			}
			if s := r.action.SchedulerName; s != "" {
				switch {
				case len(out.Ignored) >= MaxReported && (!obj.Pod || obj.Operation != policyv1alpha1.Create):
					out.MoreIgnored++
				case !obj.Pod:
					out.Ignored = append(out.Ignored, fmt.Sprintf("%s: schedulerName applies to pods only", ref))
				case obj.Operation != policyv1alpha1.Create:
					out.Ignored = append(out.Ignored, fmt.Sprintf("%s: schedulerName is set at CREATE only (spec.schedulerName is immutable)", ref))
				default:
					out.write(seen, Write{Field: FieldSchedulerName, Value: s, By: ref})
				}
			}
		}
	}
	// A rejection mutates nothing.
	if d.Enforced.Rejected() {
		d.Enforced.Writes = nil
	}
	return d
}

func (o *Outcome) write(seen map[string]Write, w Write) {
	key := w.target()
	if first, ok := seen[key]; ok {
		if first.Value != w.Value {
			if len(o.Conflicts) < MaxReported {
				o.Conflicts = append(o.Conflicts, Conflict{Winner: first, Loser: w})
			} else {
				o.MoreConflicts++
			}
		}
		return
	}
	seen[key] = w
	o.Writes = append(o.Writes, w)
}

// Summary describes an outcome in one line for audit annotations and
// events: what it rejects and writes.
func (o *Outcome) Summary() string {
	var parts []string
	if o.Rejected() {
		parts = append(parts, o.RejectionMessage())
	} else {
		writes := make([]string, 0, len(o.Writes))
		for _, w := range o.Writes {
			writes = append(writes, fmt.Sprintf("%s=%q (%s)", w.target(), w.Value, w.By))
		}
		sort.Strings(writes)
		if len(writes) > 0 {
			parts = append(parts, "sets "+joinCapped(writes, len(writes), ", "))
		}
	}
	return strings.Join(parts, "; ")
}
