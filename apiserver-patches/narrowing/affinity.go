package narrowing

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

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
//
// The work is bounded by a budget linear in the size of both affinities (see
// budgetFor); an update that would need more is rejected as too large to
// prove, which is sound. At most maxRejected terms are explained, and every
// explanation is clipped, so the error text stays small whatever the input.
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
	a.budget = budgetFor(oldTerms, newTerms)
	tooLarge := func(i int) *field.Error {
		return field.Forbidden(termsPath, fmt.Sprintf(
			"the update is too large to prove that it narrows the previous affinity (%d new terms, %d previous terms; the check stopped at new term %d): "+
				"put each new term at the index of the previous term it narrows, or use fewer and smaller terms, or delete and recreate the pod instead",
			len(newTerms), len(oldTerms), i))
	}
	old := make([]*compiledTerm, len(oldTerms))
	for i := range oldTerms {
		old[i] = a.compileTerm(&oldTerms[i], oldSide)
	}
	if a.spent {
		return field.ErrorList{tooLarge(0)}
	}
	var errs field.ErrorList
	for i := range newTerms {
		reason, over := checkTerm(a, &newTerms[i], i, old, oldTerms)
		if over {
			return append(errs, tooLarge(i))
		}
		if reason == "" {
			continue
		}
		errs = append(errs, field.Invalid(termsPath.Index(i), clip(DescribeTerm(&newTerms[i]), maxValueBytes), clip(reason, maxDetailBytes)))
		if len(errs) == maxRejected && i+1 < len(newTerms) {
			// The update is rejected already: checking and explaining the
			// rest would cost time and error text proportional to the input.
			return append(errs, field.Forbidden(termsPath, fmt.Sprintf(
				"new terms %d to %d were not checked: the update is rejected already; fix the terms above first", i+1, len(newTerms)-1)))
		}
	}
	return errs
}

const (
	// maxRejected is how many rejected new terms are explained; the check
	// stops at the next one.
	maxRejected = 8
	// maxDetailBytes and maxValueBytes clip each error's reason and term.
	maxDetailBytes = 2048
	maxValueBytes  = 512
	// maxParts is how many per-term reasons or notes a message lists.
	maxParts = 8
	// baseBudget and budgetPerUnit size the check's budget: enough for
	// every realistic affinity whatever its shape, and linear in the size
	// of the update beyond that.
	baseBudget    = 1 << 20
	budgetPerUnit = 32
)

// budgetFor sizes the budget of one check from the input: a unit per term,
// requirement and value on either side.
func budgetFor(oldTerms, newTerms []core.NodeSelectorTerm) int64 {
	units := int64(0)
	for _, terms := range [][]core.NodeSelectorTerm{oldTerms, newTerms} {
		for i := range terms {
			units++
			for _, reqs := range [][]core.NodeSelectorRequirement{terms[i].MatchExpressions, terms[i].MatchFields} {
				for j := range reqs {
					units += 1 + int64(len(reqs[j].Values))
				}
			}
		}
	}
	return baseBudget + budgetPerUnit*units
}

// clip shortens s to at most limit bytes (at a character boundary), saying
// how much was left out.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("... (%d more bytes)", len(s)-cut)
}

// checkTerm returns "" when new term i is contained in some old term, and
// otherwise why not; over reports that the budget ran out first.
func checkTerm(a *arena, term *core.NodeSelectorTerm, i int, old []*compiledTerm, oldTerms []core.NodeSelectorTerm) (reason string, over bool) {
	n := a.compileTerm(term, newSide)
	if a.spent {
		return "", true
	}
	if i < len(old) {
		// The term at the same index is the usual container: try it first.
		if ok, _ := a.containedIn(n, old[i]); ok {
			return "", false
		}
	}
	if len(old) > 1 && a.hasEqualOld(term, oldTerms) {
		// A term kept as it was, moved to another index: the scheduler
		// matches it on the same nodes as before.
		return "", false
	}
	var gaps []*gap
	for j := range old {
		ok, g := a.containedIn(n, old[j])
		if ok {
			return "", false
		}
		if a.spent {
			return "", true
		}
		g.termIdx = j
		gaps = append(gaps, g)
	}
	return explain(a, i, n, old, gaps), false
}

// hasEqualOld reports whether some old term is written exactly as term,
// finding it by its canonical form in constant time per term.
func (a *arena) hasEqualOld(term *core.NodeSelectorTerm, oldTerms []core.NodeSelectorTerm) bool {
	if a.equal == nil {
		a.equal = make(map[string]int, len(oldTerms))
		for j := range oldTerms {
			a.equal[canonical(&oldTerms[j])] = j
		}
	}
	_, ok := a.equal[canonical(term)]
	return ok
}

// canonical spells a term unambiguously: every string is length-prefixed.
func canonical(t *core.NodeSelectorTerm) string {
	var b []byte
	add := func(s string) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	for _, reqs := range [][]core.NodeSelectorRequirement{t.MatchExpressions, t.MatchFields} {
		b = strconv.AppendInt(b, int64(len(reqs)), 10)
		b = append(b, '|')
		for i := range reqs {
			add(reqs[i].Key)
			add(string(reqs[i].Operator))
			b = strconv.AppendInt(b, int64(len(reqs[i].Values)), 10)
			b = append(b, '|')
			for _, v := range reqs[i].Values {
				add(v)
			}
		}
	}
	return string(b)
}

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
