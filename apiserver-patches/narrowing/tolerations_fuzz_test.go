package narrowing

import (
	"fmt"
	"regexp"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	core "k8s.io/kubernetes/pkg/apis/core"
)

// The tolerations rule's properties, checked with the scheduler's own
// matcher (v1.Toleration.ToleratesTaint) with its comparison-operator gate
// both off and on:
//   - sound: when TolerationsNarrowing accepts, no taint is tolerated by the
//     new list and not by the old one;
//   - explained: when it refuses, the taint it names is tolerated by the new
//     list and not by the old one (with the gate on for an Lt or Gt
//     toleration's witness, off for the others, whose refusal holds whatever
//     the gate).

var (
	genTolKeys   = []string{"", "gpu", "spot"}
	genTolValues = []string{"", "a", "1", "5", "7", "07", "-3", "0", "9223372036854775807", "-9223372036854775808", "x"}
	genTolOps    = []core.TolerationOperator{"", core.TolerationOpEqual, core.TolerationOpExists, core.TolerationOpLt, core.TolerationOpGt}
	genEffects   = []core.TaintEffect{"", core.TaintEffectNoSchedule, core.TaintEffectPreferNoSchedule, core.TaintEffectNoExecute}
	// Taint values: the generator's, their neighbours, the extremes, and one
	// no toleration names.
	taintValues = []string{"", "a", "x", "07", "unnamed", "-9223372036854775808", "-9223372036854775807", "9223372036854775806", "9223372036854775807"}
)

func init() {
	for i := -5; i <= 9; i++ {
		taintValues = append(taintValues, fmt.Sprint(i))
	}
}

func (g *gen) toleration() core.Toleration {
	t := core.Toleration{Key: g.pick(genTolKeys), Operator: genTolOps[g.intn(len(genTolOps))], Effect: genEffects[g.intn(len(genEffects))]}
	if t.Key == "" {
		// Validation has always refused any other toleration without a
		// key, so no stored pod holds one.
		t.Operator = core.TolerationOpExists
	}
	if t.Operator != core.TolerationOpExists {
		t.Value = g.pick(genTolValues)
	}
	return t
}

func (g *gen) tolerations() []core.Toleration {
	out := make([]core.Toleration, g.intn(4))
	for i := range out {
		out[i] = g.toleration()
	}
	return out
}

// narrowTolerations changes old the way a tenant narrowing it would, and
// sometimes not.
func (g *gen) narrowTolerations(old []core.Toleration) []core.Toleration {
	out := append([]core.Toleration(nil), old...)
	for range 1 + g.intn(3) {
		switch i := g.intn(max(len(out), 1)); g.intn(5) {
		case 0:
			if len(out) > 0 {
				out = append(out[:i], out[i+1:]...)
			}
		case 1:
			if len(out) > 0 && out[i].Operator != core.TolerationOpExists {
				out[i].Value = g.pick(genTolValues)
			}
		case 2:
			if len(out) > 0 && out[i].Key != "" {
				out[i].Operator = genTolOps[g.intn(len(genTolOps))]
				if out[i].Operator == core.TolerationOpExists {
					out[i].Value = ""
				}
			}
		case 3:
			if len(out) > 0 {
				out[i].Effect = genEffects[g.intn(len(genEffects))]
			}
		default:
			out = append(out, g.toleration())
		}
	}
	return out
}

func tolerates(list []core.Toleration, taint *v1.Taint, gate bool) bool {
	for i := range list {
		t := v1.Toleration{Key: list[i].Key, Operator: v1.TolerationOperator(list[i].Operator), Value: list[i].Value, Effect: v1.TaintEffect(list[i].Effect)}
		// A zero logger discards the matcher's complaints about values
		// that are not integers.
		if t.ToleratesTaint(klog.Logger{}, taint, gate) {
			return true
		}
	}
	return false
}

var witnessRE = regexp.MustCompile(`^toleration (\d+) tolerates (?:the taint ([^=]+)=(.*):(\w+)|taints (\S+)=<any value>:(\w+)|taints of every key with effect (\w+)),`)

// checkTolerations checks both properties on one case; it reports whether
// the update was accepted.
func checkTolerations(t testing.TB, oldT, newT []core.Toleration) bool {
	errs := TolerationsNarrowing(nil, newT, oldT)
	if len(errs) == 0 {
		for _, gate := range []bool{false, true} {
			for _, key := range []string{"gpu", "spot", "other"} {
				for _, effect := range []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute} {
					for _, value := range taintValues {
						taint := &v1.Taint{Key: key, Value: value, Effect: effect}
						if tolerates(newT, taint, gate) && !tolerates(oldT, taint, gate) {
							t.Fatalf("accepted a widening (gate %v): %s is tolerated by\nnew %+v\nand not by\nold %+v", gate, taint.ToString(), newT, oldT)
						}
					}
				}
			}
		}
		return true
	}
	for _, e := range errs {
		m := witnessRE.FindStringSubmatch(e.Detail)
		if m == nil {
			continue // the summary of unchecked tolerations
		}
		var i int
		fmt.Sscan(m[1], &i)
		var taint v1.Taint
		switch {
		case m[2] != "":
			taint = v1.Taint{Key: m[2], Value: m[3], Effect: v1.TaintEffect(m[4])}
		case m[5] != "":
			taint = v1.Taint{Key: m[5], Value: "unnamed", Effect: v1.TaintEffect(m[6])}
		default:
			taint = v1.Taint{Key: "other", Value: "unnamed", Effect: v1.TaintEffect(m[7])}
		}
		op := newT[i].Operator
		gate := op == core.TolerationOpLt || op == core.TolerationOpGt
		if !tolerates(newT[i:i+1], &taint, gate) || tolerates(oldT, &taint, gate) {
			t.Fatalf("refusal names %s (gate %v), which is not tolerated by new toleration %d but not the old list:\n%s\nnew %+v\nold %+v",
				taint.ToString(), gate, i, e.Detail, newT, oldT)
		}
	}
	return false
}

func tolerationsCase(t testing.TB, data []byte) bool {
	g := newGen(data)
	oldT := g.tolerations()
	newT := g.narrowTolerations(oldT)
	if g.intn(4) == 0 {
		newT = g.tolerations()
	}
	return checkTolerations(t, oldT, newT)
}

// FuzzTolerationsNarrowing: `go test -fuzz FuzzTolerationsNarrowing ./apiserver-patches/narrowing`.
func FuzzTolerationsNarrowing(f *testing.F) {
	addSeeds(f, "gantry tolerations")
	f.Fuzz(func(t *testing.T, data []byte) { tolerationsCase(t, data) })
}

// TestTolerationsNarrowingRandomized runs the fuzz properties over a fixed
// number of pseudo-random cases on every `go test`, and checks that the
// generator exercises both outcomes.
func TestTolerationsNarrowingRandomized(t *testing.T) {
	cases := 3000
	if testing.Short() {
		cases = 500
	}
	accepted := 0
	randomInputs(cases, 32, 3, func(data []byte) {
		if tolerationsCase(t, data) {
			accepted++
		}
	})
	t.Logf("%d cases: %d accepted and checked on every enumerated taint, %d refused with a checked witness", cases, accepted, cases-accepted)
	if accepted < cases/10 || cases-accepted < cases/10 {
		t.Errorf("generator is lopsided: %d of %d accepted", accepted, cases)
	}
}
