package narrowing

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
)

func req(key string, op core.NodeSelectorOperator, vals ...string) core.NodeSelectorRequirement {
	return core.NodeSelectorRequirement{Key: key, Operator: op, Values: vals}
}

func fieldReq(op core.NodeSelectorOperator, name string) core.NodeSelectorRequirement {
	return core.NodeSelectorRequirement{Key: nodeNameField, Operator: op, Values: []string{name}}
}

const (
	in     = core.NodeSelectorOpIn
	notIn  = core.NodeSelectorOpNotIn
	exists = core.NodeSelectorOpExists
	dne    = core.NodeSelectorOpDoesNotExist
	gt     = core.NodeSelectorOpGt
	lt     = core.NodeSelectorOpLt
)

func term(reqs ...core.NodeSelectorRequirement) core.NodeSelectorTerm {
	return core.NodeSelectorTerm{MatchExpressions: reqs}
}

func affinity(terms ...core.NodeSelectorTerm) *core.NodeAffinity {
	return &core.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &core.NodeSelector{NodeSelectorTerms: terms}}
}

// TestRequirementContainment covers every operator pair on one key, in both
// directions where the answer differs.
func TestRequirementContainment(t *testing.T) {
	for name, tc := range map[string]struct {
		old, new core.NodeSelectorTerm
		want     bool
		witness  string // part of the rejection message
	}{
		"In drops a value":                  {term(req("z", in, "a", "b", "c")), term(req("z", in, "a", "c")), true, ""},
		"In adds a value":                   {term(req("z", in, "a", "c")), term(req("z", in, "a", "b", "c")), false, "z=b"},
		"In reordered":                      {term(req("z", in, "a", "b")), term(req("z", in, "b", "a")), true, ""},
		"In with duplicates":                {term(req("z", in, "a")), term(req("z", in, "a", "a")), true, ""},
		"Exists to In":                      {term(req("z", exists)), term(req("z", in, "a")), true, ""},
		"In to Exists":                      {term(req("z", in, "a")), term(req("z", exists)), false, "z="},
		"Exists to Gt":                      {term(req("z", exists)), term(req("z", gt, "5")), true, ""},
		"Exists to NotIn":                   {term(req("z", exists)), term(req("z", notIn, "a")), false, "no label z"},
		"Exists to DoesNotExist":            {term(req("z", exists)), term(req("z", dne)), false, "no label z"},
		"NotIn adds a value":                {term(req("z", notIn, "a")), term(req("z", notIn, "a", "b")), true, ""},
		"NotIn drops a value":               {term(req("z", notIn, "a", "b")), term(req("z", notIn, "a")), false, "z=b"},
		"NotIn to In outside":               {term(req("z", notIn, "a")), term(req("z", in, "b", "c")), true, ""},
		"NotIn to In inside":                {term(req("z", notIn, "a")), term(req("z", in, "a", "b")), false, "z=a"},
		"NotIn to DoesNotExist":             {term(req("z", notIn, "a")), term(req("z", dne)), true, ""},
		"NotIn to Exists":                   {term(req("z", notIn, "a")), term(req("z", exists)), false, "z=a"},
		"NotIn to Gt excluding it":          {term(req("z", notIn, "3")), term(req("z", gt, "5")), true, ""},
		"NotIn to Gt including it":          {term(req("z", notIn, "7")), term(req("z", gt, "5")), false, "z=7"},
		"DoesNotExist kept":                 {term(req("z", dne)), term(req("z", dne)), true, ""},
		"DoesNotExist to In":                {term(req("z", dne)), term(req("z", in, "a")), false, "z=a"},
		"DoesNotExist to NotIn":             {term(req("z", dne)), term(req("z", notIn, "a")), false, "z="},
		"In to DoesNotExist":                {term(req("z", in, "a")), term(req("z", dne)), false, "no label z"},
		"Gt tightened":                      {term(req("z", gt, "5")), term(req("z", gt, "7")), true, ""},
		"Gt loosened":                       {term(req("z", gt, "7")), term(req("z", gt, "5")), false, "z="},
		"Lt tightened":                      {term(req("z", lt, "10")), term(req("z", lt, "3")), true, ""},
		"Lt loosened":                       {term(req("z", lt, "3")), term(req("z", lt, "10")), false, "z="},
		"Gt to In above":                    {term(req("z", gt, "5")), term(req("z", in, "6", "70")), true, ""},
		"Gt to In at bound":                 {term(req("z", gt, "5")), term(req("z", in, "5")), false, "z=5"},
		"Gt to In non-integer":              {term(req("z", gt, "5")), term(req("z", in, "abc")), false, "z=abc"},
		"Gt to In padded integer":           {term(req("z", gt, "5")), term(req("z", in, "07")), true, ""},
		"Gt to Exists":                      {term(req("z", gt, "5")), term(req("z", exists)), false, "z="},
		"Gt to NotIn":                       {term(req("z", gt, "5")), term(req("z", notIn, "3")), false, "z=other"},
		"Gt to Lt":                          {term(req("z", gt, "5")), term(req("z", lt, "9")), false, "z="},
		"Gt to Gt and Lt":                   {term(req("z", gt, "5")), term(req("z", gt, "5"), req("z", lt, "9")), true, ""},
		"range to its single integer":       {term(req("z", gt, "5"), req("z", lt, "7")), term(req("z", in, "6")), true, ""},
		"single value to the range around":  {term(req("z", in, "6")), term(req("z", gt, "5"), req("z", lt, "7")), false, "z=06"},
		"Lt to Gt disjoint":                 {term(req("z", lt, "3")), term(req("z", gt, "5")), false, "z="},
		"new range empty":                   {term(req("z", in, "6")), term(req("z", gt, "5"), req("z", lt, "6")), true, ""},
		"new In and NotIn contradict":       {term(req("z", in, "a")), term(req("z", in, "b"), req("z", notIn, "b")), true, ""},
		"new term contradicts on other key": {term(req("z", in, "a")), term(req("y", in, "x"), req("y", dne)), true, ""},
		"key added":                         {term(req("z", in, "a")), term(req("z", in, "a"), req("y", exists)), true, ""},
		"key dropped":                       {term(req("z", in, "a"), req("y", exists)), term(req("z", in, "a")), false, "no label y"},
		"Gt at int64 max admits nothing":    {term(req("z", in, "a")), term(req("z", gt, "9223372036854775807")), true, ""},
		"Lt at int64 min admits nothing":    {term(req("z", in, "a")), term(req("z", lt, "-9223372036854775808")), true, ""},
		"negative range":                    {term(req("z", lt, "0")), term(req("z", lt, "-5"), req("z", gt, "-10")), true, ""},
		"old range vs new negative":         {term(req("z", gt, "0")), term(req("z", lt, "-5")), false, "z=-"},
		"field In kept with label added": {
			core.NodeSelectorTerm{MatchFields: []core.NodeSelectorRequirement{fieldReq(in, "n1")}},
			core.NodeSelectorTerm{MatchFields: []core.NodeSelectorRequirement{fieldReq(in, "n1")}, MatchExpressions: []core.NodeSelectorRequirement{req("z", in, "a")}},
			true, ""},
		"field NotIn to In other": {
			core.NodeSelectorTerm{MatchFields: []core.NodeSelectorRequirement{fieldReq(notIn, "n1")}},
			core.NodeSelectorTerm{MatchFields: []core.NodeSelectorRequirement{fieldReq(in, "n2")}},
			true, ""},
		"field NotIn to In same": {
			core.NodeSelectorTerm{MatchFields: []core.NodeSelectorRequirement{fieldReq(notIn, "n1")}},
			core.NodeSelectorTerm{MatchFields: []core.NodeSelectorRequirement{fieldReq(in, "n1")}},
			false, `"n1"`},
		"field dropped": {
			core.NodeSelectorTerm{MatchFields: []core.NodeSelectorRequirement{fieldReq(in, "n1")}},
			term(req("z", in, "a")),
			false, "the node named"},
	} {
		t.Run(name, func(t *testing.T) {
			errs := ValidateNodeAffinityMutation(field.NewPath("spec", "affinity", "nodeAffinity"), affinity(tc.new), affinity(tc.old))
			if got := len(errs) == 0; got != tc.want {
				t.Fatalf("accepted = %v, want %v (errors: %v)", got, tc.want, errs)
			}
			if !tc.want && !strings.Contains(errs.ToAggregate().Error(), tc.witness) {
				t.Errorf("rejection %q does not mention %q", errs.ToAggregate().Error(), tc.witness)
			}
		})
	}
}

func TestTermEdits(t *testing.T) {
	zone := func(v ...string) core.NodeSelectorRequirement { return req("zone", in, v...) }
	typ := func(v ...string) core.NodeSelectorRequirement { return req("type", in, v...) }
	for name, tc := range map[string]struct {
		old, new *core.NodeAffinity
		wantErr  string // "" accepts
	}{
		"old nil: anything":             {nil, affinity(term(zone("a"))), ""},
		"old only preferred":            {&core.NodeAffinity{}, affinity(term(zone("a"))), ""},
		"preferred changes freely":      {&core.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: affinity(term(zone("a"))).RequiredDuringSchedulingIgnoredDuringExecution}, &core.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: affinity(term(zone("a"))).RequiredDuringSchedulingIgnoredDuringExecution, PreferredDuringSchedulingIgnoredDuringExecution: []core.PreferredSchedulingTerm{{Weight: 1, Preference: term(zone("z"))}}}, ""},
		"required removed":              {affinity(term(zone("a"))), nil, "may not be removed"},
		"required removed, pref":        {affinity(term(zone("a"))), &core.NodeAffinity{}, "may not be removed"},
		"unchanged":                     {affinity(term(zone("a")), term(zone("b"))), affinity(term(zone("a")), term(zone("b"))), ""},
		"upstream append":               {affinity(term(zone("a", "b"))), affinity(term(zone("a", "b"), typ("x"))), ""},
		"term removed":                  {affinity(term(zone("a")), term(zone("b"))), affinity(term(zone("b"))), ""},
		"terms reordered":               {affinity(term(zone("a")), term(zone("b"))), affinity(term(zone("b")), term(zone("a"))), ""},
		"term split":                    {affinity(term(zone("a", "b"))), affinity(term(zone("a"), typ("x")), term(zone("b"))), ""},
		"term added":                    {affinity(term(zone("a"), typ("x"))), affinity(term(zone("a"), typ("x")), term(zone("c"))), "term 1 admits no label type, zone=c, which no previous term admits"},
		"term widened":                  {affinity(term(zone("a")), term(zone("b"))), affinity(term(zone("a")), term(zone("b", "c"))), "term 1 admits zone=c, which no previous term admits"},
		"merge needs one container":     {affinity(term(zone("a")), term(zone("b"))), affinity(term(zone("a", "b"))), "not contained in any single previous term: previous term 0 does not admit zone=b; previous term 1 does not admit zone=a"},
		"all terms removed":             {affinity(term(zone("a"))), affinity(), ""},
		"empty new term":                {affinity(term(zone("a"))), affinity(core.NodeSelectorTerm{}), ""},
		"empty old term admits nothing": {affinity(core.NodeSelectorTerm{}), affinity(term(zone("a"))), "which no previous term admits"},
		"old uninterpretable": {
			affinity(term(req("zone", "Near", "a"))), affinity(term(zone("a"))),
			"Gantry cannot interpret (zone Near [a])"},
		"new uninterpretable ignored": {
			affinity(term(zone("a"))), affinity(term(zone("a"), req("type", gt, "x"))), ""},
		"new uninterpretable cannot hide a widening": {
			affinity(term(zone("a"))), affinity(term(req("zone", gt, "x"))),
			"was ignored"},
	} {
		t.Run(name, func(t *testing.T) {
			errs := ValidateNodeAffinityMutation(field.NewPath("spec", "affinity", "nodeAffinity"), tc.new, tc.old)
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("rejected: %v", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("accepted, want an error containing %q", tc.wantErr)
			}
			if msg := errs.ToAggregate().Error(); !strings.Contains(msg, tc.wantErr) {
				t.Errorf("error %q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}

func TestRejectionNamesFieldAndTerm(t *testing.T) {
	errs := ValidateNodeAffinityMutation(field.NewPath("spec", "affinity", "nodeAffinity"),
		affinity(term(req("zone", in, "a")), term(req("zone", in, "c"))), affinity(term(req("zone", in, "a", "b"))))
	if len(errs) != 1 {
		t.Fatalf("want one error, got %v", errs)
	}
	e := errs[0]
	if e.Type != field.ErrorTypeInvalid {
		t.Errorf("type = %s, want Invalid (HTTP 422)", e.Type)
	}
	if want := "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1]"; e.Field != want {
		t.Errorf("field = %s, want %s", e.Field, want)
	}
	if e.BadValue != "{zone In [c]}" {
		t.Errorf("value = %v", e.BadValue)
	}
	if e.Detail != "term 1 admits zone=c, which no previous term admits" {
		t.Errorf("detail = %q", e.Detail)
	}
}
