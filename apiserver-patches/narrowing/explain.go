package narrowing

// The words of a rejection: a witness node that a new term admits and no old
// term does, or old term by old term why a new term is not contained.

import (
	"fmt"
	"sort"
	"strings"

	core "k8s.io/kubernetes/pkg/apis/core"
)

// explain words the rejection of new term i: with a node that the new term
// admits and no old term does when one is found, else old term by old term.
func explain(a *arena, i int, n *compiledTerm, old []*compiledTerm, gaps []*gap) string {
	suffix := ""
	if n.uninterpreted != "" {
		suffix = fmt.Sprintf(" (its requirement %s was ignored: Gantry cannot interpret it)", n.uninterpreted)
	}
	if len(old) == 0 {
		return fmt.Sprintf("term %d admits nodes, but the previous affinity has no terms%s", i, suffix)
	}
	if labels, name, ok := witnessNode(a, n, old, gaps); ok {
		notes := 0
		for _, g := range gaps {
			if old[g.termIdx].uninterpreted != "" {
				if notes++; notes > maxParts {
					suffix += "; and more previous terms Gantry cannot interpret"
					break
				}
				suffix += fmt.Sprintf("; previous term %d %s", g.termIdx, g.why)
			}
		}
		return fmt.Sprintf("term %d admits %s, which no previous term admits%s", i, describeNode(labels, name, n, old), suffix)
	}
	sort.Slice(gaps, func(a, b int) bool { return gaps[a].termIdx < gaps[b].termIdx })
	parts := make([]string, 0, min(len(gaps), maxParts)+1)
	for _, g := range gaps[:min(len(gaps), maxParts)] {
		parts = append(parts, fmt.Sprintf("previous term %d %s", g.termIdx, describeGap(g)))
	}
	if len(gaps) > maxParts {
		parts = append(parts, fmt.Sprintf("and %d more previous terms do not contain it either", len(gaps)-maxParts))
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
// node to that term's gap witness (which n admits too). It gives up after
// maxWitnessMoves moves or witnessBudget units of work, whichever comes
// first; explain then falls back to per-term reasons.
func witnessNode(a *arena, n *compiledTerm, old []*compiledTerm, gaps []*gap) (map[string]string, string, bool) {
	if !a.charge(n.cost()) {
		return nil, "", false
	}
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
	work := int64(0)
	for range min(4*len(old), maxWitnessMoves) {
		admitting := -1
		for j, o := range old {
			if work += o.cost(); work > witnessBudget {
				return nil, "", false
			}
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

const (
	maxWitnessMoves = 32
	witnessBudget   = 1 << 16
)

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
	const most = 8
	total := len(t.MatchExpressions) + len(t.MatchFields)
	parts := make([]string, 0, min(total, most)+1)
	for i := range t.MatchExpressions {
		if len(parts) < most {
			parts = append(parts, describeRequirement(&t.MatchExpressions[i], false))
		}
	}
	for i := range t.MatchFields {
		if len(parts) < most {
			parts = append(parts, describeRequirement(&t.MatchFields[i], true))
		}
	}
	if total > most {
		parts = append(parts, fmt.Sprintf("+%d more requirements", total-most))
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
