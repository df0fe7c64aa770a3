package narrowing

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
)

func tol(key string, op core.TolerationOperator, value string, effect core.TaintEffect) core.Toleration {
	return core.Toleration{Key: key, Operator: op, Value: value, Effect: effect}
}

const (
	noSchedule = core.TaintEffectNoSchedule
	noExecute  = core.TaintEffectNoExecute
)

func TestTolerationsNarrowing(t *testing.T) {
	lt := func(v string) core.Toleration { return tol("rank", core.TolerationOpLt, v, noSchedule) }
	gt := func(v string) core.Toleration { return tol("rank", core.TolerationOpGt, v, noSchedule) }
	eq := func(v string) core.Toleration { return tol("rank", core.TolerationOpEqual, v, noSchedule) }
	exists := tol("rank", core.TolerationOpExists, "", noSchedule)
	for _, tc := range []struct {
		name     string
		old, new []core.Toleration
		// want is "" for accepted, else a part of the first error.
		want string
	}{
		{name: "all removed", old: []core.Toleration{lt("5"), exists}},
		{name: "kept", old: []core.Toleration{lt("5"), gt("9")}, new: []core.Toleration{gt("9"), lt("5")}},
		{name: "Lt lowered", old: []core.Toleration{lt("5")}, new: []core.Toleration{lt("3")}},
		{name: "Lt raised", old: []core.Toleration{lt("5")}, new: []core.Toleration{lt("8")},
			want: "toleration 0 tolerates the taint rank=7:NoSchedule"},
		{name: "Gt raised", old: []core.Toleration{gt("5")}, new: []core.Toleration{gt("8")}},
		{name: "Gt lowered", old: []core.Toleration{gt("5")}, new: []core.Toleration{gt("2")},
			want: "the taint rank=3:NoSchedule"},
		{name: "Lt inside Exists", old: []core.Toleration{exists}, new: []core.Toleration{lt("100")}},
		{name: "Exists for Equal", old: []core.Toleration{exists}, new: []core.Toleration{eq("7")}},
		{name: "Exists not inside Lt and Gt", old: []core.Toleration{lt("5"), gt("4")}, new: []core.Toleration{exists},
			want: "taints rank=<any value>:NoSchedule"},
		{name: "Lt covered by Lt, Gt and Equal points", old: []core.Toleration{lt("3"), eq("3"), eq("4"), gt("4")},
			new: []core.Toleration{lt("100"), gt("-100")}},
		{name: "a gap between Lt and Gt not filled", old: []core.Toleration{lt("3"), eq("4"), gt("4")},
			new: []core.Toleration{lt("100")}, want: "the taint rank=3:NoSchedule"},
		{name: "Equal is never taken from Lt: the scheduler's gate may be off", old: []core.Toleration{lt("10")},
			new: []core.Toleration{eq("5")}, want: "the taint rank=5:NoSchedule"},
		{name: "07 is no integer for Lt", old: []core.Toleration{lt("3"), eq("07"), gt("3")}, new: []core.Toleration{lt("10")},
			want: "the taint rank=3:NoSchedule"},
		{name: "no effect: every effect", old: []core.Toleration{lt("5"), tol("rank", core.TolerationOpLt, "5", noExecute),
			tol("rank", core.TolerationOpLt, "9", core.TaintEffectPreferNoSchedule)},
			new: []core.Toleration{tol("rank", core.TolerationOpLt, "5", "")}},
		{name: "no effect, one missing", old: []core.Toleration{lt("5")}, new: []core.Toleration{tol("rank", core.TolerationOpLt, "5", "")},
			want: "the taint rank=4:PreferNoSchedule"},
		{name: "any key covers a key", old: []core.Toleration{tol("", core.TolerationOpExists, "", noSchedule)},
			new: []core.Toleration{exists, tol("other", core.TolerationOpEqual, "x", noSchedule)}},
		{name: "any key is not covered by keys", old: []core.Toleration{exists},
			new: []core.Toleration{tol("", core.TolerationOpExists, "", noSchedule)}, want: "taints of every key with effect NoSchedule"},
		{name: "the extremes", old: []core.Toleration{gt("9223372036854775806")}, new: []core.Toleration{eq("9223372036854775807"), gt("9223372036854775807"), lt("-9223372036854775808")},
			want: "the taint rank=9223372036854775807:NoSchedule"},
		{name: "the extremes by Equal", old: []core.Toleration{gt("9223372036854775806"), eq("9223372036854775807")},
			new: []core.Toleration{eq("9223372036854775807"), gt("9223372036854775807"), lt("-9223372036854775808")}},
		{name: "an old value that is not an integer tolerates nothing", old: []core.Toleration{lt("x")}, new: []core.Toleration{lt("1")},
			want: "the taint rank=0:NoSchedule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := TolerationsNarrowing(field.NewPath("spec", "tolerations"), tc.new, tc.old)
			switch {
			case tc.want == "" && len(errs) != 0:
				t.Errorf("refused: %v", errs)
			case tc.want != "" && len(errs) == 0:
				t.Errorf("accepted; want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(errs[0].Detail, tc.want):
				t.Errorf("error %q; want it to contain %q", errs[0].Detail, tc.want)
			}
		})
	}
}

func TestTolerationsNarrowingIsBounded(t *testing.T) {
	var old, updated []core.Toleration
	for i := range 5000 {
		old = append(old, tol("rank", core.TolerationOpEqual, string(rune('a'+i%26))+strings.Repeat("x", i%50), noSchedule))
		updated = append(updated, tol("key"+string(rune('a'+i%26)), core.TolerationOpExists, "", ""))
	}
	errs := TolerationsNarrowing(field.NewPath("spec", "tolerations"), updated, old)
	if len(errs) != maxRejected+1 {
		t.Fatalf("%d errors; want %d explained and one summary", len(errs), maxRejected)
	}
	if !strings.Contains(errs[maxRejected].Detail, "were not checked") {
		t.Errorf("last error %q", errs[maxRejected].Detail)
	}
}

func TestTolerationsUpdate(t *testing.T) {
	type opts struct{}
	upstreamCalled, validateCalled := 0, 0
	upstream := func(newPod, oldPod *core.Pod, p *field.Path, _ opts) field.ErrorList {
		upstreamCalled++
		if len(newPod.Spec.Tolerations) < len(oldPod.Spec.Tolerations) {
			return field.ErrorList{field.Forbidden(p, "upstream")}
		}
		return nil
	}
	validate := func(_ []core.Toleration, _ *field.Path, _ opts) field.ErrorList {
		validateCalled++
		return nil
	}
	hook := TolerationsUpdate(upstream, validate)
	path := field.NewPath("spec", "tolerations")
	gates := []core.PodSchedulingGate{{Name: "q"}}
	exists := tol("gpu", core.TolerationOpExists, "", "")
	gated := &core.Pod{Spec: core.PodSpec{SchedulingGates: gates, Tolerations: []core.Toleration{exists}}}
	ungated := &core.Pod{Spec: core.PodSpec{Tolerations: []core.Toleration{exists}}}

	if errs := hook(&core.Pod{}, gated, path, opts{}); len(errs) != 0 || validateCalled != 1 || upstreamCalled != 1 {
		t.Errorf("gated pod dropping a toleration: errs %v, validate %d, upstream %d", errs, validateCalled, upstreamCalled)
	}
	if errs := hook(&core.Pod{}, ungated, path, opts{}); len(errs) != 1 || errs[0].Detail != "upstream" || validateCalled != 1 {
		t.Errorf("non-gated pod must get upstream's rule alone: errs %v, validate %d", errs, validateCalled)
	}
	added := &core.Pod{Spec: core.PodSpec{Tolerations: []core.Toleration{exists, tol("spot", core.TolerationOpExists, "", "")}}}
	if errs := hook(added, gated, path, opts{}); len(errs) != 0 || validateCalled != 1 {
		t.Errorf("gated pod adding a toleration, as upstream allows: errs %v, validate %d", errs, validateCalled)
	}
	oldTwo := &core.Pod{Spec: core.PodSpec{SchedulingGates: gates, Tolerations: []core.Toleration{exists, tol("rank", core.TolerationOpLt, "5", "")}}}
	looser := &core.Pod{Spec: core.PodSpec{Tolerations: []core.Toleration{tol("rank", core.TolerationOpLt, "9", "")}}}
	errs := hook(looser, oldTwo, path, opts{})
	if len(errs) != 1 || !strings.Contains(errs[0].Detail, "the taint rank=8:NoSchedule") || errs[0].Field != "spec.tolerations[0]" {
		t.Errorf("gated pod dropping one toleration and loosening another: errs %v", errs)
	}
}
