package narrowing

import (
	"fmt"
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
