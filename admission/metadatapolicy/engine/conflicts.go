package engine

import (
	"fmt"
	"sort"

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
// operation.
func (p *Policy) sharesTargets(q *Policy) bool {
	return p.resources.Intersection(q.resources).Len() > 0 && p.operations.Intersection(q.operations).Len() > 0
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

// Conflicts returns, for each policy, a description of every other policy
// that may write one of its keys with a different value, sorted. nsLabels
// returns a namespace's labels (false if unknown: then a cluster policy is
// assumed to select it).
func Conflicts(policies []*Policy, nsLabels func(string) (map[string]string, bool)) map[*Policy][]string {
	byTarget := map[string][]Write{}
	for _, p := range policies {
		for _, w := range p.Writes() {
			byTarget[w.target()] = append(byTarget[w.target()], w)
		}
	}
	out := map[*Policy][]string{}
	seen := map[string]bool{}
	add := func(p *Policy, msg string) {
		if k := p.ID() + "\x00" + msg; !seen[k] {
			seen[k] = true
			out[p] = append(out[p], msg)
		}
	}
	for target, ws := range byTarget {
		for i := range ws {
			for j := i + 1; j < len(ws); j++ {
				a, b := ws[i], ws[j]
				if a.Value == b.Value || !mayOverlap(a.By.Policy, b.By.Policy, nsLabels) {
					continue
				}
				add(a.By.Policy, fmt.Sprintf("%s: %s writes %q (this policy's rule %d writes %q)", target, b.By, b.Value, a.By.Index, a.Value))
				add(b.By.Policy, fmt.Sprintf("%s: %s writes %q (this policy's rule %d writes %q)", target, a.By, a.Value, b.By.Index, b.Value))
			}
		}
	}
	for _, msgs := range out {
		sort.Strings(msgs)
	}
	return out
}
