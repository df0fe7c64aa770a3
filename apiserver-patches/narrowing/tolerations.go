package narrowing

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
)

// TolerationsUpdateFunc validates the tolerations of a pod update; it has
// the shape of the hook Gantry's patch adds to upstream's validation
// package, whose options type O this package does not import.
type TolerationsUpdateFunc[O any] func(newPod, oldPod *core.Pod, fldPath *field.Path, opts O) field.ErrorList

// TolerationsUpdate returns the tolerations rule of Gantry's kube-apiserver.
// An update upstream accepts is accepted: every existing toleration stays,
// changed in its tolerationSeconds at most, and new ones may be added (for
// any pod, as upstream). While the old pod has scheduling gates, an update
// whose tolerations provably tolerate no taint the old ones did not is
// accepted too: tolerations removed, Exists turned into Equal, an Lt value
// lowered or a Gt value raised (KEP-5471's numeric operators). Anything else
// is refused, naming a taint the new tolerations tolerate and the old ones do
// not. validate is upstream's ValidateTolerations, applied to the new list
// either way.
//
// The check is sound whatever the scheduler's TaintTolerationComparisonOperators
// gate: an old Lt or Gt toleration is never taken to cover a new Equal or
// Exists one, since with the gate off the scheduler matches no taint by it.
// Beyond upstream's check, which runs first, its cost is linear in the number
// of tolerations, up to a logarithm.
func TolerationsUpdate[O any](upstream TolerationsUpdateFunc[O], validate func([]core.Toleration, *field.Path, O) field.ErrorList) TolerationsUpdateFunc[O] {
	return func(newPod, oldPod *core.Pod, fldPath *field.Path, opts O) field.ErrorList {
		upstreamErrs := upstream(newPod, oldPod, fldPath, opts)
		if len(upstreamErrs) == 0 || len(oldPod.Spec.SchedulingGates) == 0 {
			return upstreamErrs
		}
		return append(TolerationsNarrowing(fldPath, newPod.Spec.Tolerations, oldPod.Spec.Tolerations), validate(newPod.Spec.Tolerations, fldPath, opts)...)
	}
}

// TolerationsNarrowing returns nil when every taint the new tolerations
// tolerate, the old ones tolerate too, and otherwise, for each new toleration
// (at most maxRejected) that tolerates more, the error that names a taint it
// tolerates and no old toleration does.
func TolerationsNarrowing(fldPath *field.Path, newTolerations, oldTolerations []core.Toleration) field.ErrorList {
	cover := coverOf(oldTolerations)
	var errs field.ErrorList
	for i := range newTolerations {
		taint, ok := cover.covers(&newTolerations[i])
		if ok {
			continue
		}
		errs = append(errs, field.Forbidden(fldPath.Index(i), clip(fmt.Sprintf(
			"toleration %d tolerates %s, which no previous toleration does: while the pod has scheduling gates, tolerations may be "+
				"removed or narrowed (Equal for Exists, a lower Lt value, a higher Gt value), or added with every previous one kept, "+
				"not both in one update", i, taint), maxDetailBytes)))
		if len(errs) == maxRejected && i+1 < len(newTolerations) {
			return append(errs, field.Forbidden(fldPath, fmt.Sprintf(
				"tolerations %d to %d were not checked: the update is refused already", i+1, len(newTolerations)-1)))
		}
	}
	return errs
}

// taintEffects are the effects a taint may have (node validation admits no
// other), in the order an error names them.
var taintEffects = [...]core.TaintEffect{core.TaintEffectNoSchedule, core.TaintEffectPreferNoSchedule, core.TaintEffectNoExecute}

// tolerationCover is what a list of tolerations tolerates, effect by effect.
type tolerationCover struct {
	// anyKey: a toleration with no key (Exists) tolerates every taint of
	// the effect.
	anyKey [len(taintEffects)]bool
	keys   [len(taintEffects)]map[string]*keyCover
}

// keyCover is what the tolerations of one key and effect tolerate.
type keyCover struct {
	exists bool
	equal  map[string]bool
	// lt and gt are the highest Lt and the lowest Gt value: Lt tolerates
	// taint values [MinInt64, lt-1], Gt [gt+1, MaxInt64].
	lt, gt       int64
	hasLt, hasGt bool
	// points are the Equal values that are decimal integers, sorted and
	// unique: they fill gaps between the Lt and Gt ranges.
	points []int64
}

func coverOf(tolerations []core.Toleration) *tolerationCover {
	c := &tolerationCover{}
	for i := range tolerations {
		t := &tolerations[i]
		for e := range taintEffects {
			if t.Effect != "" && t.Effect != taintEffects[e] {
				continue
			}
			if t.Key == "" {
				// Validation allows only Exists without a key; anything
				// else tolerates nothing here.
				c.anyKey[e] = c.anyKey[e] || t.Operator == core.TolerationOpExists
				continue
			}
			if c.keys[e] == nil {
				c.keys[e] = map[string]*keyCover{}
			}
			k := c.keys[e][t.Key]
			if k == nil {
				k = &keyCover{equal: map[string]bool{}}
				c.keys[e][t.Key] = k
			}
			k.add(t)
		}
	}
	for e := range c.keys {
		for _, k := range c.keys[e] {
			slices.Sort(k.points)
			k.points = slices.Compact(k.points)
		}
	}
	return c
}

func (k *keyCover) add(t *core.Toleration) {
	switch t.Operator {
	case core.TolerationOpExists:
		k.exists = true
	case core.TolerationOpEqual, "":
		k.equal[t.Value] = true
		if v, ok := decimalInt64(t.Value); ok {
			k.points = append(k.points, v)
		}
	case core.TolerationOpLt:
		if v, ok := decimalInt64(t.Value); ok && (!k.hasLt || v > k.lt) {
			k.lt, k.hasLt = v, true
		}
	case core.TolerationOpGt:
		if v, ok := decimalInt64(t.Value); ok && (!k.hasGt || v < k.gt) {
			k.gt, k.hasGt = v, true
		}
	}
	// An unknown operator, or a numeric one with a value that is not a
	// decimal integer, tolerates nothing (the scheduler's matching).
}

// covers reports whether the cover tolerates everything t tolerates, and when
// it does not, describes a taint that t tolerates and the cover does not.
func (c *tolerationCover) covers(t *core.Toleration) (string, bool) {
	for e := range taintEffects {
		if t.Effect != "" && t.Effect != taintEffects[e] {
			continue
		}
		if c.anyKey[e] {
			continue
		}
		effect := taintEffects[e]
		if t.Key == "" {
			// Only Exists passes validation without a key; the scheduler
			// matches the others on every key too.
			return fmt.Sprintf("taints of every key with effect %s", effect), false
		}
		k := c.keys[e][t.Key]
		if k != nil && k.exists {
			continue
		}
		switch t.Operator {
		case core.TolerationOpExists:
			return fmt.Sprintf("taints %s=<any value>:%s", t.Key, effect), false
		case core.TolerationOpEqual, "":
			if k == nil || !k.equal[t.Value] {
				return fmt.Sprintf("the taint %s=%s:%s", t.Key, t.Value, effect), false
			}
		case core.TolerationOpLt, core.TolerationOpGt:
			v, ok := decimalInt64(t.Value)
			if !ok {
				continue // tolerates nothing; validation refuses it
			}
			lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
			lt := t.Operator == core.TolerationOpLt
			switch {
			case lt && v == math.MinInt64, !lt && v == math.MaxInt64:
				continue // tolerates no int64 value
			case lt:
				hi = v - 1
			default:
				lo = v + 1
			}
			// The witness is the uncovered value nearest to t's bound.
			if w, ok := k.gapIn(lo, hi, lt); !ok {
				return fmt.Sprintf("the taint %s=%d:%s", t.Key, w, effect), false
			}
		}
	}
	return "", true
}

// gapIn reports whether every integer in [lo, hi] is tolerated by k's Lt, Gt
// or Equal tolerations, and when one is not, returns the highest such (top)
// or the lowest.
func (k *keyCover) gapIn(lo, hi int64, top bool) (int64, bool) {
	if k == nil {
		if top {
			return hi, false
		}
		return lo, false
	}
	// What neither the Lt nor the Gt range tolerates: [lt, gt].
	if k.hasLt {
		lo = max(lo, k.lt)
	}
	if k.hasGt {
		hi = min(hi, k.gt)
	}
	if lo > hi {
		return 0, true
	}
	// The Equal points must fill [lo, hi]. They are sorted and unique
	// integers, so p[i+d] - d never decreases in d: the first point off the
	// run that starts at lo (or, from the top, ends at hi) is found by
	// binary search, and the check costs two logarithms whatever the input.
	p := k.points
	i := sort.Search(len(p), func(i int) bool { return p[i] >= lo })
	j := sort.Search(len(p), func(i int) bool { return p[i] > hi })
	n := j - i // points in [lo, hi]
	if uint64(n) == uint64(hi)-uint64(lo)+1 {
		return 0, true
	}
	if top {
		d := sort.Search(n, func(d int) bool { return p[j-1-d] < hi-int64(d) })
		return hi - int64(d), false
	}
	d := sort.Search(n, func(d int) bool { return p[i+d] > lo+int64(d) })
	return lo + int64(d), false
}

// decimalInt64 parses a toleration or taint value the way the scheduler's
// Lt and Gt do: a decimal integer in canonical form, within int64.
func decimalInt64(s string) (int64, bool) {
	if len(content.IsDecimalInteger(s)) > 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}
