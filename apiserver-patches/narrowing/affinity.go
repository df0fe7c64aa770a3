package narrowing

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
)

// ValidateNodeAffinityMutation validates a change of the node affinity of a
// gated pod. It has the signature of upstream's validateNodeAffinityMutation,
// which Gantry's kube-apiserver replaces with it.
//
//   - If the old required affinity is nil, anything may be set (as upstream).
//   - Otherwise the new required affinity must be non-nil and each new term
//     must be contained in at least one old term.
//   - Preferred terms may change freely (as upstream).
func ValidateNodeAffinityMutation(path *field.Path, newAffinity, oldAffinity *core.NodeAffinity) field.ErrorList {
	if oldAffinity == nil || oldAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	requiredPath := path.Child("requiredDuringSchedulingIgnoredDuringExecution")
	if newAffinity == nil || newAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return field.ErrorList{field.Required(requiredPath,
			"may not be removed while the pod has scheduling gates: that would admit every node; narrow it instead")}
	}
	oldTerms := oldAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	newTerms := newAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	termsPath := requiredPath.Child("nodeSelectorTerms")

	a := getArena()
	defer a.release()
	old := make([]*compiledTerm, len(oldTerms))
	for i := range oldTerms {
		old[i] = a.compileTerm(&oldTerms[i], oldSide)
	}
	var errs field.ErrorList
	for i := range newTerms {
		if reason := checkTerm(a, &newTerms[i], i, old); reason != "" {
			errs = append(errs, field.Invalid(termsPath.Index(i), DescribeTerm(&newTerms[i]), reason))
		}
	}
	return errs
}

// checkTerm returns "" when new term i is contained in some old term, and
// otherwise why not.
func checkTerm(a *arena, term *core.NodeSelectorTerm, i int, old []*compiledTerm) string {
	n := a.compileTerm(term, newSide)
	if i < len(old) {
		// The term at the same index is the usual container: try it first.
		if ok, _ := containedIn(n, old[i]); ok {
			return ""
		}
	}
	var gaps []*gap
	for j := range old {
		ok, g := containedIn(n, old[j])
		if ok {
			return ""
		}
		g.termIdx = j
		gaps = append(gaps, g)
	}
	return explain(i, n, old, gaps)
}

// explain words the rejection of new term i: with a node that the new term
// admits and no old term does when one is found, else old term by old term.
func explain(i int, n *compiledTerm, old []*compiledTerm, gaps []*gap) string {
	suffix := ""
	if n.uninterpreted != "" {
		suffix = fmt.Sprintf(" (its requirement %s was ignored: Gantry cannot interpret it)", n.uninterpreted)
	}
	if len(old) == 0 {
		return fmt.Sprintf("term %d admits nodes, but the previous affinity has no terms%s", i, suffix)
	}
	if labels, name, ok := witnessNode(n, old, gaps); ok {
		for _, g := range gaps {
			if old[g.termIdx].uninterpreted != "" {
				suffix += fmt.Sprintf("; previous term %d %s", g.termIdx, g.why)
			}
		}
		return fmt.Sprintf("term %d admits %s, which no previous term admits%s", i, describeNode(labels, name, n, old), suffix)
	}
	sort.Slice(gaps, func(a, b int) bool { return gaps[a].termIdx < gaps[b].termIdx })
	parts := make([]string, 0, len(gaps))
	for _, g := range gaps {
		parts = append(parts, fmt.Sprintf("previous term %d %s", g.termIdx, describeGap(g)))
	}
	return fmt.Sprintf("term %d is not contained in any single previous term: %s; each new term must narrow one previous term%s",
		i, strings.Join(parts, "; "), suffix)
}

func describeGap(g *gap) string {
	switch {
	case g.why != "":
		return g.why
	case g.field:
		return fmt.Sprintf("does not admit the node named %q", g.value)
	case g.absent:
		return fmt.Sprintf("does not admit nodes without label %s", g.key)
	default:
		return fmt.Sprintf("does not admit %s=%s", g.key, g.value)
	}
}

// witnessNode looks for a node n admits and no old term does: it starts from
// a node n admits and, for each old term that still admits it, moves the
// node to that term's gap witness (which n admits too). It gives up after a
// bounded number of moves; explain then falls back to per-term reasons.
func witnessNode(n *compiledTerm, old []*compiledTerm, gaps []*gap) (map[string]string, string, bool) {
	labels := map[string]string{}
	name := "node"
	for _, k := range n.keys {
		v, absent := k.sample()
		switch {
		case k.field:
			name = v
		case !absent:
			labels[k.key] = v
		}
	}
	byTerm := make(map[int]*gap, len(gaps))
	for _, g := range gaps {
		byTerm[g.termIdx] = g
	}
	for range 4 * len(old) {
		admitting := -1
		for j, o := range old {
			if o.admits(labels, name) {
				admitting = j
				break
			}
		}
		if admitting < 0 {
			return labels, name, n.admits(labels, name)
		}
		g := byTerm[admitting]
		if g == nil || g.why != "" {
			return nil, "", false
		}
		switch {
		case g.field:
			name = g.value
		case g.absent:
			delete(labels, g.key)
		default:
			labels[g.key] = g.value
		}
	}
	return nil, "", false
}

// describeNode words a witness node by the labels the terms involved look at.
func describeNode(labels map[string]string, name string, n *compiledTerm, old []*compiledTerm) string {
	keys := map[string]bool{}
	named := false
	for _, t := range append([]*compiledTerm{n}, old...) {
		for _, k := range t.keys {
			if k.field {
				named = true
			} else {
				keys[k.key] = true
			}
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var parts []string
	if named {
		parts = append(parts, fmt.Sprintf("the node named %q", name))
	}
	for _, k := range sorted {
		if v, ok := labels[k]; ok {
			parts = append(parts, k+"="+v)
		} else {
			parts = append(parts, "no label "+k)
		}
	}
	const most = 6
	if len(parts) > most {
		parts = append(parts[:most], "...")
	}
	if len(parts) == 0 {
		return "every node"
	}
	return strings.Join(parts, ", ")
}

// DescribeTerm renders a term compactly for messages, e.g.
// {zone In [a b], gpu Exists, metadata.name NotIn [n1]}.
func DescribeTerm(t *core.NodeSelectorTerm) string {
	parts := make([]string, 0, len(t.MatchExpressions)+len(t.MatchFields))
	for i := range t.MatchExpressions {
		parts = append(parts, describeRequirement(&t.MatchExpressions[i], false))
	}
	for i := range t.MatchFields {
		parts = append(parts, describeRequirement(&t.MatchFields[i], true))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func describeRequirement(r *core.NodeSelectorRequirement, field bool) string {
	prefix := ""
	if field {
		prefix = "field "
	}
	const most = 8
	vals := r.Values
	more := ""
	if len(vals) > most {
		vals, more = vals[:most], fmt.Sprintf(" +%d more", len(r.Values)-most)
	}
	switch r.Operator {
	case core.NodeSelectorOpExists, core.NodeSelectorOpDoesNotExist:
		if len(r.Values) == 0 {
			return prefix + r.Key + " " + string(r.Operator)
		}
	}
	return fmt.Sprintf("%s%s %s [%s%s]", prefix, r.Key, r.Operator, strings.Join(vals, " "), more)
}
