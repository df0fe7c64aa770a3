//go:build gantry_patched

package install

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/gantry-dev/gantry/apiserver-patches/narrowing"
)

// upstreamCheck is upstream's validateNodeAffinityMutation: the hook's
// default, captured before anything installs Gantry's.
var upstreamCheck = validation.ValidateGatedNodeAffinityMutation

type benchCase struct {
	name     string
	old, new *core.NodeAffinity
}

func affinity(terms ...core.NodeSelectorTerm) *core.NodeAffinity {
	return &core.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &core.NodeSelector{NodeSelectorTerms: terms}}
}

func req(key string, op core.NodeSelectorOperator, vals ...string) core.NodeSelectorRequirement {
	return core.NodeSelectorRequirement{Key: key, Operator: op, Values: vals}
}

// largeAffinity has terms × reqs requirements of values values each; drop
// removes that many values from the end of every In list.
func largeAffinity(terms, reqs, values, drop int, extra bool) *core.NodeAffinity {
	a := affinity()
	for t := range terms {
		var term core.NodeSelectorTerm
		for r := range reqs {
			vals := make([]string, 0, values)
			for v := range values - drop {
				vals = append(vals, fmt.Sprintf("value-%d-%d", t, v))
			}
			term.MatchExpressions = append(term.MatchExpressions, req(fmt.Sprintf("key-%d", r), core.NodeSelectorOpIn, vals...))
		}
		if extra {
			term.MatchExpressions = append(term.MatchExpressions, req("gantry.dev/placed", core.NodeSelectorOpExists))
		}
		a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(a.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, term)
	}
	return a
}

// benchCases are pairs both checks accept (upstream's append-only edits), so
// each does its full work, plus the large narrowing only Gantry accepts.
func benchCases() []benchCase {
	zone := req("topology.kubernetes.io/zone", core.NodeSelectorOpIn, "zone-a", "zone-b", "zone-c")
	typ := req("node.kubernetes.io/instance-type", core.NodeSelectorOpIn, "gantry.standard-8")
	gpu := req("gantry.dev/gpu", core.NodeSelectorOpExists)
	return []benchCase{
		{"typical/1term-append", affinity(core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{zone}}),
			affinity(core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{zone, typ}})},
		{"typical/2terms-append", affinity(core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{zone, gpu}}, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{typ}}),
			affinity(core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{zone, gpu, typ}}, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{typ, zone}})},
		{"typical/3terms-append", affinity(core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{zone}}, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{typ, gpu}}, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{gpu}}),
			affinity(core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{zone, gpu}}, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{typ, gpu, zone}}, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{gpu, typ}})},
		{"large/10x10x100-append", largeAffinity(10, 10, 100, 0, false), largeAffinity(10, 10, 100, 0, true)},
		{"large/10x10x100-narrow", largeAffinity(10, 10, 100, 0, false), largeAffinity(10, 10, 100, 10, false)},
	}
}

// Adversarial shapes (security review, finding 1), scaled: each returns
// old and new affinities of about size terms.
var adversarialShapes = []struct {
	name  string
	build func(size int) (old, new *core.NodeAffinity)
}{
	// size-2 fillers {b Exists}, {a In [other]}, {a In [other-0]}; new:
	// size terms {a Exists}. Rejected; the witness search used to bounce
	// between the last two old terms rescanning every filler (cubic).
	{"review", func(size int) (*core.NodeAffinity, *core.NodeAffinity) {
		var old, nw []core.NodeSelectorTerm
		for range size - 2 {
			old = append(old, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{req("b", core.NodeSelectorOpExists)}})
		}
		old = append(old, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{req("a", core.NodeSelectorOpIn, "other")}},
			core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{req("a", core.NodeSelectorOpIn, "other-0")}})
		for range size {
			nw = append(nw, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{req("a", core.NodeSelectorOpExists)}})
		}
		return affinity(old...), affinity(nw...)
	}},
	// Every new term narrows only the last old term: size x size
	// comparisons that all succeed in the end (quadratic), unless the budget
	// stops them.
	{"last-container", func(size int) (*core.NodeAffinity, *core.NodeAffinity) {
		var old, nw []core.NodeSelectorTerm
		for i := range size - 1 {
			old = append(old, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{req("b", core.NodeSelectorOpIn, fmt.Sprintf("x-%d", i))}})
		}
		old = append(old, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{req("a", core.NodeSelectorOpExists)}})
		for i := range size {
			nw = append(nw, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{req("a", core.NodeSelectorOpIn, fmt.Sprintf("v-%d", i))}})
		}
		return affinity(old...), affinity(nw...)
	}},
	// size distinct terms, reversed: an honest update, accepted through
	// the exact-term index (quadratic without it).
	{"reordered", func(size int) (*core.NodeAffinity, *core.NodeAffinity) {
		var old, nw []core.NodeSelectorTerm
		for i := range size {
			old = append(old, core.NodeSelectorTerm{MatchExpressions: []core.NodeSelectorRequirement{
				req("a", core.NodeSelectorOpIn, fmt.Sprintf("v-%d", i)), req("b", core.NodeSelectorOpExists)}})
		}
		for i := range size {
			nw = append(nw, old[size-1-i])
		}
		return affinity(old...), affinity(nw...)
	}},
	// One term of size requirements on distinct keys, plus one appended:
	// accepted by both checks; key lookups used to scan the term.
	{"wide-term", func(size int) (*core.NodeAffinity, *core.NodeAffinity) {
		var reqs []core.NodeSelectorRequirement
		for i := range size {
			reqs = append(reqs, req(fmt.Sprintf("key-%d", i), core.NodeSelectorOpIn, "a", "b"))
		}
		more := append(append([]core.NodeSelectorRequirement{}, reqs...), req("extra", core.NodeSelectorOpExists))
		return affinity(core.NodeSelectorTerm{MatchExpressions: reqs}), affinity(core.NodeSelectorTerm{MatchExpressions: more})
	}},
}

var adversarialSizes = []int{10, 100, 1000, 2000}

func errorBytes(errs field.ErrorList) int {
	n := 0
	for _, e := range errs {
		n += len(e.Detail) + len(e.Error())
	}
	return n
}

// BenchmarkAdversarial: both checks on the review's adversarial shapes at
// sizes 10 to 2000, with the bytes of error text each returns, so any
// super-linear growth shows. `go test -tags gantry_patched
// -modfile=_output/patched/go.mod -run '^$' -bench Adversarial -count 3
// ./apiserver-patches/narrowing/install`.
func BenchmarkAdversarial(b *testing.B) {
	for _, shape := range adversarialShapes {
		for _, size := range adversarialSizes {
			old, nw := shape.build(size)
			c := benchCase{name: fmt.Sprintf("%s/%d", shape.name, size), old: old, new: nw}
			for _, check := range []struct {
				name string
				f    func(*field.Path, *core.NodeAffinity, *core.NodeAffinity) field.ErrorList
			}{{"upstream", upstreamCheck}, {"gantry", narrowing.ValidateNodeAffinityMutation}} {
				b.Run(c.name+"/"+check.name, func(b *testing.B) {
					run(check.f, c)(b)
					errs := check.f(path, c.new, c.old)
					b.ReportMetric(float64(errorBytes(errs)), "errbytes")
					b.ReportMetric(float64(len(errs)), "errs")
				})
			}
		}
	}
}

var path = field.NewPath("spec", "affinity", "nodeAffinity")

func run(check func(*field.Path, *core.NodeAffinity, *core.NodeAffinity) field.ErrorList, c benchCase) func(*testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			check(path, c.new, c.old)
		}
	}
}

// BenchmarkNodeAffinityMutation: upstream's check and Gantry's on the same
// pairs. `make bench` runs TestNarrowingVsUpstream, which prints ratios.
func BenchmarkNodeAffinityMutation(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(c.name+"/upstream", run(upstreamCheck, c))
		b.Run(c.name+"/gantry", run(narrowing.ValidateNodeAffinityMutation, c))
	}
}

// TestNarrowingVsUpstream measures both checks in one run and prints
// ns/op and the ratio. It asserts nothing about time (machines are noisy);
// it runs only when GANTRY_BENCH is set.
func TestNarrowingVsUpstream(t *testing.T) {
	if os.Getenv("GANTRY_BENCH") == "" {
		t.Skip("set GANTRY_BENCH=1 (make bench) to measure")
	}
	fmt.Printf("%-26s %14s %14s %8s %10s %10s\n", "case", "upstream ns/op", "gantry ns/op", "ratio", "upstream", "gantry")
	for _, c := range benchCases() {
		up := testing.Benchmark(run(upstreamCheck, c))
		ga := testing.Benchmark(run(narrowing.ValidateNodeAffinityMutation, c))
		fmt.Printf("%-26s %14d %14d %7.2fx %10s %10s\n", c.name, up.NsPerOp(), ga.NsPerOp(),
			float64(ga.NsPerOp())/float64(max(up.NsPerOp(), 1)),
			verdict(upstreamCheck(path, c.new, c.old)), verdict(narrowing.ValidateNodeAffinityMutation(path, c.new, c.old)))
	}
	fmt.Printf("\n%-26s %14s %14s %10s %10s %14s\n", "adversarial shape/size", "upstream ns/op", "gantry ns/op", "upstream", "gantry", "gantry errbytes")
	for _, shape := range adversarialShapes {
		for _, size := range adversarialSizes {
			old, nw := shape.build(size)
			c := benchCase{name: fmt.Sprintf("%s/%d", shape.name, size), old: old, new: nw}
			up := testing.Benchmark(run(upstreamCheck, c))
			ga := testing.Benchmark(run(narrowing.ValidateNodeAffinityMutation, c))
			errs := narrowing.ValidateNodeAffinityMutation(path, c.new, c.old)
			fmt.Printf("%-26s %14d %14d %10s %10s %14d\n", c.name, up.NsPerOp(), ga.NsPerOp(),
				verdict(upstreamCheck(path, c.new, c.old)), verdict(errs), errorBytes(errs))
		}
	}
}

func verdict(errs field.ErrorList) string {
	if len(errs) == 0 {
		return "accepts"
	}
	return "rejects"
}
