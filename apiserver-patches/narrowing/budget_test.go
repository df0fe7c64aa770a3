package narrowing

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
)

// Adversarial shapes (security review, finding 1) and others that aim at a
// different super-linear path each. Each returns old and new affinities of
// about m terms.

// reviewShape: m-2 fillers {b Exists}, then {a In [other]} and
// {a In [other-0]}; k new terms {a Exists}. The witness search used to
// bounce between the last two old terms, rescanning every filler.
func reviewShape(m, k int) (oldA, newA *core.NodeAffinity) {
	var old []core.NodeSelectorTerm
	for range m - 2 {
		old = append(old, term(req("b", exists)))
	}
	old = append(old, term(req("a", in, "other")), term(req("a", in, "other-0")))
	var nw []core.NodeSelectorTerm
	for range k {
		nw = append(nw, term(req("a", exists)))
	}
	return affinity(old...), affinity(nw...)
}

// lastContainerShape: every new term narrows only the last old term, so
// each one is compared with all m old terms: m x k comparisons that all
// succeed in the end (no rejection stops the check early).
func lastContainerShape(m, k int) (oldA, newA *core.NodeAffinity) {
	var old []core.NodeSelectorTerm
	for i := range m - 1 {
		old = append(old, term(req("b", in, fmt.Sprintf("x-%d", i))))
	}
	old = append(old, term(req("a", exists)))
	var nw []core.NodeSelectorTerm
	for i := range k {
		nw = append(nw, term(req("a", in, fmt.Sprintf("v-%d", i))))
	}
	return affinity(old...), affinity(nw...)
}

// reorderedShape: m distinct terms, new in reverse order: an honest update
// that the exact-term index accepts in linear time.
func reorderedShape(m int) (oldA, newA *core.NodeAffinity) {
	var old, nw []core.NodeSelectorTerm
	for i := range m {
		old = append(old, term(req("a", in, fmt.Sprintf("v-%d", i)), req("b", exists)))
	}
	for i := range m {
		nw = append(nw, old[m-1-i])
	}
	return affinity(old...), affinity(nw...)
}

// wideTermShape: one term with m requirements on distinct keys, and the
// same term with one more: key lookups used to scan the term.
func wideTermShape(m int) (oldA, newA *core.NodeAffinity) {
	var reqs []core.NodeSelectorRequirement
	for i := range m {
		reqs = append(reqs, req(fmt.Sprintf("key-%d", i), in, "a", "b"))
	}
	more := append(append([]core.NodeSelectorRequirement{}, reqs...), req("extra", exists))
	return affinity(term(reqs...)), affinity(term(more...))
}

// manyListsShape: one key with m In requirements of m values each on both
// sides: every value probed against every list is m^3.
func manyListsShape(m int) (oldA, newA *core.NodeAffinity) {
	var reqs []core.NodeSelectorRequirement
	for range m {
		vals := make([]string, m)
		for j := range vals {
			vals[j] = fmt.Sprintf("v-%d", j)
		}
		reqs = append(reqs, req("a", in, vals...))
	}
	return affinity(term(req("a", notIn, "zzz"))), affinity(term(reqs...))
}

func errorBytes(errs field.ErrorList) int {
	n := 0
	for _, e := range errs {
		n += len(e.Detail) + len(e.Error())
	}
	return n
}

const maxErrorBytes = 64 << 10

// TestAdversarialSizes: at m = k = 2000 every shape is decided (soundly:
// the widenings are rejected, an honest update either accepted or rejected
// as too large) with less than 64 KiB of error text.
func TestAdversarialSizes(t *testing.T) {
	const m = 2000
	path := field.NewPath("spec", "affinity", "nodeAffinity")
	for _, tc := range []struct {
		name     string
		old, new *core.NodeAffinity
		wantErr  string // "" accepts
	}{
		{"review shape", nil, nil, "term 0 is not contained in any single previous term"},
		{"last container", nil, nil, "too large to prove that it narrows"},
		{"reordered", nil, nil, ""},
		{"wide term", nil, nil, ""},
		{"many lists on one key", nil, nil, "too large to prove that it narrows"},
		{"long escaped values", nil, nil, "new terms 8 to 1999 were not checked"},
	} {
		switch tc.name {
		case "review shape":
			tc.old, tc.new = reviewShape(m, m)
		case "last container":
			tc.old, tc.new = lastContainerShape(m, m)
		case "reordered":
			tc.old, tc.new = reorderedShape(m)
		case "wide term":
			tc.old, tc.new = wideTermShape(m)
		case "many lists on one key":
			tc.old, tc.new = manyListsShape(m / 4)
		case "long escaped values":
			// Values that %q quadruples, in many requirements, on every
			// rejected term: the clipping must bound the quoted text too.
			tc.old, _ = reviewShape(m, m)
			var reqs []core.NodeSelectorRequirement
			for i := range 20 {
				vals := make([]string, 20)
				for j := range vals {
					vals[j] = strings.Repeat("\x00", 1000) + fmt.Sprint(i, j)
				}
				reqs = append(reqs, req(strings.Repeat("\x01", 300)+fmt.Sprint(i), in, vals...))
			}
			var nw []core.NodeSelectorTerm
			for range m {
				nw = append(nw, term(reqs...))
			}
			tc.new = affinity(nw...)
		}
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateNodeAffinityMutation(path, tc.new, tc.old)
			if size := errorBytes(errs); size >= maxErrorBytes {
				t.Errorf("%d bytes of error text in %d errors, want < %d", size, len(errs), maxErrorBytes)
			}
			if len(errs) > maxRejected+1 {
				t.Errorf("%d errors, want at most %d", len(errs), maxRejected+1)
			}
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted, want an error containing %q", tc.wantErr)
			}
			if msg := errs.ToAggregate().Error(); !strings.Contains(msg, tc.wantErr) {
				t.Errorf("error %.500q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}

// TestRejectionsAreCapped: when more than maxRejected new terms are
// rejected, the first maxRejected are explained and one error says the rest
// were not checked.
func TestRejectionsAreCapped(t *testing.T) {
	oldA, newA := reviewShape(20, 20)
	errs := ValidateNodeAffinityMutation(field.NewPath("spec", "affinity", "nodeAffinity"), newA, oldA)
	if len(errs) != maxRejected+1 {
		t.Fatalf("want %d errors, got %d: %v", maxRejected+1, len(errs), errs)
	}
	if want := fmt.Sprintf("new terms %d to 19 were not checked", maxRejected); !strings.Contains(errs[maxRejected].Error(), want) {
		t.Errorf("last error %q does not contain %q", errs[maxRejected].Error(), want)
	}
}

// TestOldInvalidLabelValues (security review, finding 20): the scheduler
// makes a term holding a value that is not a valid label value match no
// node, so narrowing from it is a widening.
func TestOldInvalidLabelValues(t *testing.T) {
	for name, tc := range map[string]struct {
		old, new *core.NodeAffinity
	}{
		"In with a space":     {affinity(term(req("zone", in, "a", "b c"))), affinity(term(req("zone", in, "a")))},
		"Gt of a negative":    {affinity(term(req("rank", gt, "-5"))), affinity(term(req("rank", gt, "0")))},
		"NotIn, over-long":    {affinity(term(req("zone", notIn, strings.Repeat("x", 64)))), affinity(term(req("zone", notIn, "a", strings.Repeat("x", 64))))},
		"ends with a hyphen":  {affinity(term(req("zone", in, "a", "b-"))), affinity(term(req("zone", in, "a")))},
		"starts with a colon": {affinity(term(req("zone", in, ":a"))), affinity(term(req("zone", in, ":a"), req("type", exists)))},
	} {
		t.Run(name, func(t *testing.T) {
			errs := ValidateNodeAffinityMutation(field.NewPath("spec", "affinity", "nodeAffinity"), tc.new, tc.old)
			if len(errs) == 0 {
				t.Fatalf("accepted a widening: the old term matches no node")
			}
			if msg := errs.ToAggregate().Error(); !strings.Contains(msg, "previous term 0") {
				t.Errorf("error %q does not name the previous term", msg)
			}
		})
	}
	// Unchanged terms stay accepted (the scheduler matches them alike).
	same := affinity(term(req("zone", in, "a", "b c")), term(req("zone", in, "d")))
	moved := affinity(term(req("zone", in, "d")), term(req("zone", in, "a", "b c")))
	if errs := ValidateNodeAffinityMutation(field.NewPath("spec"), moved, same); len(errs) != 0 {
		t.Errorf("rejected reordering unchanged terms: %v", errs)
	}
}

func TestValidLabelValues(t *testing.T) {
	for v, want := range map[string]bool{
		"": true, "a": true, "a-b_c.d": true, "A9": true, strings.Repeat("x", 63): true,
		strings.Repeat("x", 64): false, "-a": false, "a-": false, "a b": false, "+7": false, "-3": false, "é": false, ".": false,
	} {
		if got := validLabelValues([]string{v}); got != want {
			t.Errorf("validLabelValues(%q) = %v, want %v", v, got, want)
		}
	}
}
