package narrowing

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	core "k8s.io/kubernetes/pkg/apis/core"

	"github.com/gantry-dev/gantry/test/wrappers"
)

// The soundness property, checked with the scheduler's own matcher: when the
// check accepts an update, no node matches the new required affinity without
// matching the old one. Old affinities with terms the scheduler cannot parse
// are checked too: the scheduler's lazy selector makes such a term match no
// node, and stored pods may hold legacy invalid label values.

var (
	genKeys      = []string{"zone", "type", "rank"}
	genValues    = []string{"a", "b", "c", "1", "5", "7", "07", "10", "-3", ""}
	genInts      = []string{"1", "5", "7", "-3", "0", "9223372036854775807", "-9223372036854775808", "x"}
	genNames     = []string{"n1", "n2", "n3"}
	genOperators = []core.NodeSelectorOperator{in, notIn, exists, dne, gt, lt}
)

// gen draws choices from fuzz input, then from a PRNG seeded by it, so every
// input decodes to a well-formed case.
type gen struct {
	data []byte
	rng  *rand.Rand
}

func newGen(data []byte) *gen {
	var seed [32]byte
	copy(seed[:], data)
	return &gen{data: data, rng: rand.New(rand.NewChaCha8(seed))}
}

func (g *gen) intn(n int) int {
	if len(g.data) >= 2 {
		v := int(binary.LittleEndian.Uint16(g.data))
		g.data = g.data[2:]
		return v % n
	}
	return g.rng.IntN(n)
}

func (g *gen) pick(s []string) string { return s[g.intn(len(s))] }

func (g *gen) requirement() core.NodeSelectorRequirement {
	r := core.NodeSelectorRequirement{Key: g.pick(genKeys), Operator: genOperators[g.intn(len(genOperators))]}
	switch r.Operator {
	case in, notIn:
		for range 1 + g.intn(3) {
			r.Values = append(r.Values, g.pick(genValues))
		}
	case gt, lt:
		r.Values = []string{g.pick(genInts)}
	}
	if g.intn(40) == 0 { // malformed: what validation would reject
		switch g.intn(3) {
		case 0:
			r.Operator = "Near"
		case 1:
			r.Values = append(r.Values, "extra")
		default:
			r.Values = nil
		}
	}
	return r
}

func (g *gen) term() core.NodeSelectorTerm {
	var t core.NodeSelectorTerm
	for range g.intn(4) {
		t.MatchExpressions = append(t.MatchExpressions, g.requirement())
	}
	if g.intn(4) == 0 {
		op := in
		if g.intn(2) == 0 {
			op = notIn
		}
		key := nodeNameField
		if g.intn(20) == 0 {
			key = "spec.unschedulable"
		}
		t.MatchFields = append(t.MatchFields, core.NodeSelectorRequirement{Key: key, Operator: op, Values: []string{g.pick(genNames)}})
	}
	return t
}

func (g *gen) affinity() *core.NodeAffinity {
	if g.intn(10) == 0 {
		return nil
	}
	a := &core.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &core.NodeSelector{}}
	for range 1 + g.intn(3) {
		a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, g.term())
	}
	return a
}

// mutate derives a new affinity from old by the edits controllers make, so
// that many cases are accepted and the property has work to do.
func (g *gen) mutate(old *core.NodeAffinity) *core.NodeAffinity {
	if old == nil || old.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return g.affinity()
	}
	terms := make([]core.NodeSelectorTerm, 0)
	for _, t := range old.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		c := *t.DeepCopy()
		terms = append(terms, c)
	}
	for range 1 + g.intn(3) {
		if len(terms) == 0 {
			terms = append(terms, g.term())
			continue
		}
		i := g.intn(len(terms))
		t := &terms[i]
		switch g.intn(8) {
		case 0: // drop a term
			terms = append(terms[:i], terms[i+1:]...)
		case 1: // split: a copy with an extra requirement
			c := *t.DeepCopy()
			c.MatchExpressions = append(c.MatchExpressions, g.requirement())
			terms = append(terms, c)
		case 2: // add a requirement
			t.MatchExpressions = append(t.MatchExpressions, g.requirement())
		case 3: // drop a value
			if n := len(t.MatchExpressions); n > 0 {
				r := &t.MatchExpressions[g.intn(n)]
				if len(r.Values) > 0 {
					r.Values = r.Values[1:]
				}
			}
		case 4: // add a value
			if n := len(t.MatchExpressions); n > 0 {
				r := &t.MatchExpressions[g.intn(n)]
				r.Values = append(r.Values, g.pick(genValues))
			}
		case 5: // change an operator
			if n := len(t.MatchExpressions); n > 0 {
				t.MatchExpressions[g.intn(n)].Operator = genOperators[g.intn(len(genOperators))]
			}
		case 6: // replace a requirement
			if n := len(t.MatchExpressions); n > 0 {
				t.MatchExpressions[g.intn(n)] = g.requirement()
			}
		default: // a new term
			terms = append(terms, g.term())
		}
	}
	return &core.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &core.NodeSelector{NodeSelectorTerms: terms}}
}

func toV1(s *core.NodeSelector) *v1.NodeSelector {
	out := &v1.NodeSelector{}
	conv := func(rs []core.NodeSelectorRequirement) []v1.NodeSelectorRequirement {
		var o []v1.NodeSelectorRequirement
		for _, r := range rs {
			o = append(o, v1.NodeSelectorRequirement{Key: r.Key, Operator: v1.NodeSelectorOperator(r.Operator), Values: r.Values})
		}
		return o
	}
	for _, t := range s.NodeSelectorTerms {
		out.NodeSelectorTerms = append(out.NodeSelectorTerms, v1.NodeSelectorTerm{MatchExpressions: conv(t.MatchExpressions), MatchFields: conv(t.MatchFields)})
	}
	return out
}

// nodeValues returns, for the affinities of a case, the label values worth
// trying: every value they mention, integers next to every integer they
// mention in other spellings, a fresh value and the empty one.
func nodeValues(affs ...*core.NodeAffinity) []string {
	seen := map[string]bool{"fresh": true, "": true}
	add := func(v string) { seen[v] = true }
	for _, a := range affs {
		if a == nil || a.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			continue
		}
		for _, t := range a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range t.MatchExpressions {
				for _, v := range r.Values {
					add(v)
					if n, ok := parseInt(v); ok {
						for _, d := range []int64{-1, 0, 1} {
							if m := n + d; (d > 0) == (m > n) || d == 0 {
								add(strconv.FormatInt(m, 10))
								if m >= 0 {
									add("0" + strconv.FormatInt(m, 10))
									add("+" + strconv.FormatInt(m, 10))
								}
							}
						}
					}
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// nodes enumerates nodes over the generated keys: each key absent or set to
// one of values, under each name.
func nodes(values []string, visit func(*v1.Node)) {
	labels := make([]string, len(genKeys))
	const absent = "\x00absent"
	var rec func(i int)
	rec = func(i int) {
		if i == len(genKeys) {
			for _, name := range append(genNames, "n-other") {
				n := wrappers.MakeNode(name)
				for k, v := range labels {
					if v != absent {
						n.Label(genKeys[k], v)
					}
				}
				visit(n.Obj())
			}
			return
		}
		for _, v := range append([]string{absent}, values...) {
			labels[i] = v
			rec(i + 1)
		}
	}
	rec(0)
}

type outcome int

const (
	rejected outcome = iota
	acceptedOldInvalid
	acceptedChecked
)

func checkSound(t testing.TB, oldA, newA *core.NodeAffinity) outcome {
	errs := ValidateNodeAffinityMutation(field.NewPath("spec", "affinity", "nodeAffinity"), newA, oldA)
	if len(errs) > 0 {
		for _, e := range errs {
			if e.Detail == "" {
				t.Fatalf("rejection without a reason: %v", e)
			}
		}
		return rejected
	}
	if oldA == nil || oldA.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return acceptedChecked // anything goes, as upstream
	}
	// The scheduler matches required affinity with the lazy selector: a term
	// it cannot parse (e.g. one holding a value that is not a valid label
	// value, which stored pods may have) matches no node, the others match
	// as usual. Both sides are checked that way, parsable or not.
	got := acceptedChecked
	if _, err := nodeaffinity.NewNodeSelector(toV1(oldA.RequiredDuringSchedulingIgnoredDuringExecution)); err != nil {
		got = acceptedOldInvalid
	}
	oldSel := nodeaffinity.NewLazyErrorNodeSelector(toV1(oldA.RequiredDuringSchedulingIgnoredDuringExecution))
	if newA == nil || newA.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("accepted removing the required affinity")
	}
	newSel := nodeaffinity.NewLazyErrorNodeSelector(toV1(newA.RequiredDuringSchedulingIgnoredDuringExecution))
	nodes(nodeValues(oldA, newA), func(n *v1.Node) {
		newOK, _ := newSel.Match(n)
		oldOK, _ := oldSel.Match(n)
		if newOK && !oldOK {
			t.Fatalf("accepted a widening: node %s %v matches the new affinity but not the old\nold: %s\nnew: %s",
				n.Name, n.Labels, describe(oldA), describe(newA))
		}
	})
	return got
}

func describe(a *core.NodeAffinity) string {
	if a == nil || a.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "<none>"
	}
	s := ""
	for i := range a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		s += DescribeTerm(&a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[i]) + " "
	}
	return s
}

func fuzzCase(t testing.TB, data []byte) outcome {
	g := newGen(data)
	oldA := g.affinity()
	var newA *core.NodeAffinity
	if g.intn(3) == 0 {
		newA = g.affinity()
	} else {
		newA = g.mutate(oldA)
	}
	return checkSound(t, oldA, newA)
}

// FuzzNarrowingIsSound: `go test -fuzz FuzzNarrowingIsSound ./apiserver-patches/narrowing`.
func FuzzNarrowingIsSound(f *testing.F) {
	addSeeds(f, "gantry narrowing")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCase(t, data) })
}

// addSeeds gives a fuzz target its 16 seed inputs.
func addSeeds(f *testing.F, name string) {
	for i := range 16 {
		f.Add(fmt.Appendf(nil, "seed-%d-%s", i, name))
	}
}

// randomInputs calls visit with n pseudo-random inputs of size bytes, the
// same ones on every run for the same seed.
func randomInputs(n, size int, seed uint64, visit func([]byte)) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for range n {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.IntN(256))
		}
		visit(data)
	}
}

// TestNarrowingIsSoundRandomized runs the fuzz property over a fixed number
// of pseudo-random cases on every `go test`, and checks that the generator
// exercises both outcomes.
func TestNarrowingIsSoundRandomized(t *testing.T) {
	cases := 1500
	if testing.Short() {
		cases = 300
	}
	var counts [3]int
	randomInputs(cases, 48, 1, func(data []byte) { counts[fuzzCase(t, data)]++ })
	t.Logf("%d cases: %d rejected, %d accepted and checked on every enumerated node, %d accepted with an old affinity the scheduler cannot parse",
		cases, counts[rejected], counts[acceptedChecked], counts[acceptedOldInvalid])
	if counts[rejected] < cases/20 || counts[acceptedChecked] < cases/20 {
		t.Errorf("generator is lopsided: %v", counts)
	}
}
