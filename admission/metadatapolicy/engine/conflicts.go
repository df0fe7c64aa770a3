package engine

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Writes lists every key the policy's rules may write, in rule order.
func (p *Policy) Writes() []Write {
	var out []Write
	for i := range p.rules {
		r := &p.rules[i]
		ref := RuleRef{Policy: p, Index: r.index}
		for _, k := range sortedKeys(r.action.UpdatedLabels) {
			out = append(out, Write{Field: FieldLabel, Key: k, Value: string(r.action.UpdatedLabels[k]), By: ref})
		}
		for _, k := range sortedKeys(r.action.UpdatedAnnotations) {
			out = append(out, Write{Field: FieldAnnotation, Key: k, Value: string(r.action.UpdatedAnnotations[k]), By: ref})
		}
		if r.action.SchedulerName != "" {
			out = append(out, Write{Field: FieldSchedulerName, Value: r.action.SchedulerName, By: ref})
		}
	}
	return out
}

// sharesTargets reports whether two policies apply to a common resource and
// operation. It allocates nothing: it runs for many pairs of policies.
func (p *Policy) sharesTargets(q *Policy) bool {
	return intersects(p.resources, q.resources) && intersects(p.operations, q.operations)
}

func intersects[T comparable](a, b sets.Set[T]) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	for k := range a {
		if b.Has(k) {
			return true
		}
	}
	return false
}

// mayOverlap reports whether two policies may apply to one object. Label and
// annotation predicates are not compared, so this may over-report: the
// Conflict condition says the policies *may* conflict.
func mayOverlap(p, q *Policy, nsLabels func(string) (map[string]string, bool)) bool {
	if p == q || p.Enforcement != policyv1alpha1.Enforce || q.Enforcement != policyv1alpha1.Enforce || !p.sharesTargets(q) {
		return false
	}
	switch {
	case p.Namespace != "" && q.Namespace != "":
		return p.Namespace == q.Namespace
	case p.Namespace != "":
		p, q = q, p
		fallthrough
	case q.Namespace != "":
		// p is a cluster policy: does it select q's namespace?
		labels, ok := nsLabels(q.Namespace)
		return !ok || p.SelectsNamespace(q.Namespace, labels)
	default:
		return true // two cluster policies may select a common namespace
	}
}

// MaxConflictMessages bounds the conflicts Conflicts lists for one policy;
// a last message says that there are more. MaxOverlapChecks bounds the
// pairs of policies one call compares; past it, the policies not yet
// analysed get a message saying their analysis is incomplete. Both keep the
// analysis, which runs inside kube-apiserver after every policy change,
// linear in the number of writes however many policies a tenant creates.
const (
	MaxConflictMessages = 10
	MaxOverlapChecks    = 1 << 20
)

// maxOverlapChecks is MaxOverlapChecks; tests lower it.
var maxOverlapChecks = MaxOverlapChecks

// policyWrites are the writes of one policy to one target, in rule order.
type policyWrites struct {
	policy *Policy
	writes []Write
	// uniform is set when every write has one value: two uniform policies
	// with one value cannot conflict, whatever their targets.
	uniform bool
}

// targetWrites are the enforced writes to one target (a label key, an
// annotation key or the scheduler), by namespace ("" for cluster policies).
type targetWrites struct {
	all   []*policyWrites
	byNS  map[string][]*policyWrites
	first string
	// distinct is set when two writes have different values: only then can
	// the target conflict.
	distinct bool
}

// Conflicts returns, for each policy, a description of other policies'
// rules that may write one of its keys with a different value, sorted, at
// most MaxConflictMessages of them (then "and more ..."). nsLabels returns
// a namespace's labels (false if unknown: then a cluster policy is assumed
// to select it).
//
// Writes are grouped by target, then by namespace: a key with a single
// value conflicts nowhere and costs nothing more, and a namespaced policy
// is compared with the policies of its own namespace and the cluster
// policies only. A policy's analysis stops at its first
// MaxConflictMessages+1 conflicts, before anything more is formatted.
func Conflicts(policies []*Policy, nsLabels func(string) (map[string]string, bool)) map[*Policy][]string {
	byTarget := map[string]*targetWrites{}
	var targets []string
	for _, p := range policies {
		if p.Enforcement != policyv1alpha1.Enforce {
			continue
		}
		mine := map[string]*policyWrites{}
		for _, w := range p.Writes() {
			key := w.target()
			pw := mine[key]
			if pw == nil {
				pw = &policyWrites{policy: p, uniform: true}
				mine[key] = pw
				tw := byTarget[key]
				if tw == nil {
					tw = &targetWrites{byNS: map[string][]*policyWrites{}, first: w.Value}
					byTarget[key] = tw
					targets = append(targets, key)
				}
				tw.all = append(tw.all, pw)
				tw.byNS[p.Namespace] = append(tw.byNS[p.Namespace], pw)
			}
			if len(pw.writes) > 0 && pw.writes[0].Value != w.Value {
				pw.uniform = false
			}
			if w.Value != byTarget[key].first {
				byTarget[key].distinct = true
			}
			pw.writes = append(pw.writes, w)
		}
	}
	sort.Strings(targets)

	out := map[*Policy][]string{}
	found := map[*Policy]int{} // conflicts found, up to MaxConflictMessages+1
	budget := maxOverlapChecks
	exhausted := false
	for _, target := range targets {
		tw := byTarget[target]
		if !tw.distinct {
			continue
		}
		for _, pw := range tw.all {
			p := pw.policy
			if found[p] > MaxConflictMessages {
				continue
			}
			candidates := [][]*policyWrites{tw.all}
			if p.Namespace != "" {
				candidates = [][]*policyWrites{tw.byNS[p.Namespace], tw.byNS[""]}
			}
		scan:
			for _, group := range candidates {
				for _, qw := range group {
					q := qw.policy
					if q == p || pw.uniform && qw.uniform && pw.writes[0].Value == qw.writes[0].Value {
						continue
					}
					if budget == 0 {
						exhausted = true
						break scan
					}
					budget--
					if !mayOverlap(p, q, nsLabels) {
						continue
					}
					for _, a := range pw.writes {
						for _, b := range qw.writes {
							if a.Value == b.Value {
								continue
							}
							if found[p]++; found[p] > MaxConflictMessages {
								break scan
							}
							out[p] = append(out[p], fmt.Sprintf("%s: %s writes %q (this policy's rule %d writes %q)", target, b.By, b.Value, a.By.Index, a.Value))
						}
					}
				}
			}
		}
		if exhausted {
			break
		}
	}
	for p, msgs := range out {
		sort.Strings(msgs)
		if found[p] > MaxConflictMessages {
			out[p] = append(msgs, fmt.Sprintf("and more: only the first %d conflicts are listed", MaxConflictMessages))
		}
	}
	if exhausted {
		for _, p := range policies {
			if p.Enforcement == policyv1alpha1.Enforce && found[p] <= MaxConflictMessages {
				out[p] = append(out[p], fmt.Sprintf("conflict analysis stopped after %d comparisons: too many policies write the same keys, conflicts may be missing", maxOverlapChecks))
			}
		}
	}
	return out
}
