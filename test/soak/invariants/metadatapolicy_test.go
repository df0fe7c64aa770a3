package invariants

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// mdp is a MetadataPolicy of namespace team, with uid, at generation gen.
func mdp(name, uid string, gen int64) *wrappers.MetadataPolicyWrapper {
	w := wrappers.MakeMetadataPolicy(name, "team")
	w.UID, w.Generation = types.UID(uid), gen
	return w
}

// selecting selects objects with the label k=v.
func selecting(k, v string) policyv1alpha1.PolicyPredicate {
	return policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}}
}

func setLabel(k, v string) policyv1alpha1.PolicyAction {
	return policyv1alpha1.PolicyAction{UpdatedLabels: map[string]policyv1alpha1.LabelValue{k: policyv1alpha1.LabelValue(v)}}
}

func setAnnotation(k, v string) policyv1alpha1.PolicyAction {
	return policyv1alpha1.PolicyAction{UpdatedAnnotations: map[string]policyv1alpha1.AnnotationValue{k: policyv1alpha1.AnnotationValue(v)}}
}

var reject = policyv1alpha1.PolicyAction{Reject: true}

// createdAt is a pod of namespace team created at t0+d.
func createdAt(d time.Duration, name string) *wrappers.PodWrapper {
	w := pod("team", name, "1", "n1")
	w.CreationTimestamp = mtime(d)
	return w
}

func TestMetadataPolicy(t *testing.T) {
	every := policyv1alpha1.PolicyPredicate{}
	// governing: every pod gets governed=true, and pods labelled
	// forbidden=true are rejected, as the soak run's own policy.
	governing := func(gen int64) *policyv1alpha1.MetadataPolicy {
		return mdp("gov", "pol-1", gen).Rule(every, setLabel("governed", "true")).Rule(selecting("forbidden", "true"), reject).Obj()
	}
	applied := createdAt(10*time.Second, "p").Label("governed", "true").Obj()
	bare := createdAt(10*time.Second, "p").Obj()
	// The defaults judge a pod created at 10s against a generation seen
	// at 5s or before and at 16s or after: PolicyLag 5s, and a second and
	// Skew 5s after its creation.
	cases := map[string]struct {
		steps []step
		want  []want
	}{
		"applied": {
			steps: []step{{0, []any{governing(1)}}, {20 * time.Second, []any{governing(1), applied}}},
		},
		"a label missing": {
			steps: []step{{0, []any{governing(1)}}, {20 * time.Second, []any{governing(1), bare}}, {30 * time.Second, []any{governing(1), bare}}},
			want: []want{{InvariantPolicyNotApplied, []string{"Pod team/p (uid uid-p), created at 2026-03-01T12:00:10Z, lacks what MetadataPolicy team/gov (uid pol-1) generation 1 sets",
				`rule 0 sets label governed="true", which the pod lacks`, "the checker saw that generation from 2026-03-01T12:00:00Z to 2026-03-01T12:00:20Z",
				"first seen at 2026-03-01T12:00:20Z"}}},
		},
		"a label of another value": {
			steps: []step{{0, []any{governing(1)}}, {20 * time.Second, []any{governing(1), createdAt(10*time.Second, "p").Label("governed", "no").Obj()}}},
			want:  []want{{InvariantPolicyNotApplied, []string{`rule 0 sets label governed="true", the pod has "no"`}}},
		},
		"an annotation missing": {
			steps: []step{
				{0, []any{mdp("ann", "pol-2", 1).Rule(selecting("app", "w"), setAnnotation("a.example/x", "v")).Obj()}},
				{20 * time.Second, []any{mdp("ann", "pol-2", 1).Rule(selecting("app", "w"), setAnnotation("a.example/x", "v")).Obj(),
					createdAt(10*time.Second, "p").Label("app", "w").Obj(), createdAt(10*time.Second, "q").Obj()}},
			},
			want: []want{{InvariantPolicyNotApplied, []string{"Pod team/p (uid uid-p)", `rule 0 sets annotation a.example/x="v", which the pod lacks`}}},
		},
		"seen PolicyLag before the creation": {
			steps: []step{{5 * time.Second, []any{governing(1)}}, {20 * time.Second, []any{governing(1), bare}}},
			want:  []want{{InvariantPolicyNotApplied, []string{"Pod team/p (uid uid-p)"}}},
		},
		"seen first just inside PolicyLag: not judged": {
			steps: []step{{6 * time.Second, []any{governing(1)}}, {20 * time.Second, []any{governing(1), bare}}},
		},
		"seen again a second and Skew after the creation": {
			steps: []step{{0, []any{governing(1)}}, {16 * time.Second, []any{governing(1), bare}}},
			want:  []want{{InvariantPolicyNotApplied, []string{"Pod team/p (uid uid-p)"}}},
		},
		"seen last too soon after the creation, then another generation: not judged": {
			steps: []step{{0, []any{governing(1)}}, {15 * time.Second, []any{governing(1), bare}}, {30 * time.Second, []any{governing(2), bare}}},
		},
		"a generation change in between: not judged": {
			steps: []step{{0, []any{governing(1)}}, {8 * time.Second, []any{governing(2)}}, {20 * time.Second, []any{governing(2), bare}}},
		},
		"another generation seen between two sightings: not judged": {
			steps: []step{{0, []any{governing(1)}}, {8 * time.Second, []any{governing(2)}}, {20 * time.Second, []any{governing(1), bare}}},
		},
		"another generation seen between two sightings, a pod created under the first": {
			steps: []step{
				{0, []any{governing(1)}},
				{time.Minute, []any{governing(1), applied}},
				{time.Minute + 8*time.Second, []any{governing(2), applied}},
				{time.Minute + 20*time.Second, []any{governing(1), applied, createdAt(time.Minute+10*time.Second, "q").Obj()}},
			},
		},
		"the policy deleted after the creation, the pod listed late": {
			steps: []step{{0, []any{governing(1)}}, {16 * time.Second, []any{governing(1)}}, {30 * time.Second, []any{bare}}},
			want:  []want{{InvariantPolicyNotApplied, []string{"Pod team/p (uid uid-p)", "from 2026-03-01T12:00:00Z to 2026-03-01T12:00:16Z"}}},
		},
		"a pod created before the checker saw the policy": {
			steps: []step{{20 * time.Second, []any{governing(1), bare}}, {time.Minute, []any{governing(1), bare}}},
		},
		"a rejected pod exists": {
			steps: []step{{0, []any{governing(1)}}, {20 * time.Second, []any{governing(1), createdAt(10*time.Second, "p").Label("forbidden", "true").Obj()}}},
			want: []want{{InvariantRejectNotEnforced, []string{"Pod team/p (uid uid-p) exists, created at 2026-03-01T12:00:10Z, though MetadataPolicy team/gov (uid pol-1) generation 1 rule 1 rejects it",
				"first seen at 2026-03-01T12:00:20Z"}}},
		},
		"audit only": {
			steps: []step{
				{0, []any{mdp("gov", "pol-1", 1).Rule(every, setLabel("governed", "true")).Enforcement(policyv1alpha1.Audit).Obj()}},
				{20 * time.Second, []any{mdp("gov", "pol-1", 1).Rule(every, setLabel("governed", "true")).Enforcement(policyv1alpha1.Audit).Obj(), bare}},
			},
		},
		"targets UPDATE only": {
			steps: func() []step {
				p := mdp("gov", "pol-1", 1).Rule(every, setLabel("governed", "true"))
				p.Spec.Targets = &policyv1alpha1.Targets{Operations: []policyv1alpha1.Operation{policyv1alpha1.Update}}
				return []step{{0, []any{p.Obj()}}, {20 * time.Second, []any{p.Obj(), bare}}}
			}(),
		},
		"targets other resources": {
			steps: func() []step {
				p := mdp("gov", "pol-1", 1).Rule(every, setLabel("governed", "true"))
				p.Spec.Targets = &policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Group: "apps", Resource: "deployments"}}}
				return []step{{0, []any{p.Obj()}}, {20 * time.Second, []any{p.Obj(), bare}}}
			}(),
		},
		"targets pods on CREATE": {
			steps: func() []step {
				p := mdp("gov", "pol-1", 1).Rule(every, setLabel("governed", "true"))
				p.Spec.Targets = &policyv1alpha1.Targets{Operations: []policyv1alpha1.Operation{policyv1alpha1.Create}}
				return []step{{0, []any{p.Obj()}}, {20 * time.Second, []any{p.Obj(), bare}}}
			}(),
			want: []want{{InvariantPolicyNotApplied, []string{"Pod team/p (uid uid-p)"}}},
		},
		"a pod of another namespace": {
			steps: []step{{0, []any{governing(1)}}, {20 * time.Second, []any{governing(1), func() *v1.Pod {
				p := pod("other", "p", "1", "n1").Obj()
				p.CreationTimestamp = mtime(10 * time.Second)
				return p
			}()}}},
		},
		"a selector on a key policies write reads the pod as submitted": {
			steps: func() []step {
				p := mdp("gov", "pol-1", 1).Rule(every, setLabel("governed", "true")).Rule(selecting("governed", "true"), setAnnotation("a.example/x", "v")).Obj()
				return []step{{0, []any{p}}, {20 * time.Second, []any{p, applied}}}
			}(),
		},
		"the first writer wins": {
			steps: func() []step {
				p := mdp("gov", "pol-1", 1).Rule(every, setLabel("tier", "a")).Rule(every, setLabel("tier", "b")).Obj()
				return []step{{0, []any{p}}, {20 * time.Second, []any{p, createdAt(10*time.Second, "p").Label("tier", "a").Obj(),
					createdAt(10*time.Second, "q").Label("tier", "b").Obj()}}}
			}(),
			want: []want{{InvariantPolicyNotApplied, []string{"Pod team/q (uid uid-q)", `rule 0 sets label tier="a", the pod has "b"`}}},
		},
		"its scheduler chosen": {
			steps: func() []step {
				p := mdp("sched", "pol-3", 1).Rule(every, policyv1alpha1.PolicyAction{SchedulerName: "gantry-besteffort"}).Obj()
				return []step{{0, []any{p}}, {20 * time.Second, []any{p, createdAt(10*time.Second, "p").SchedulerName("gantry-besteffort").Obj()}}}
			}(),
		},
		"its scheduler not chosen": {
			steps: func() []step {
				p := mdp("sched", "pol-3", 1).Rule(every, policyv1alpha1.PolicyAction{SchedulerName: "gantry-besteffort"}).Obj()
				return []step{{0, []any{p}}, {20 * time.Second, []any{p, createdAt(10*time.Second, "p").SchedulerName("default-scheduler").Obj()}}}
			}(),
			want: []want{{InvariantSchedulerNotChosen, []string{`Pod team/p (uid uid-p), created at 2026-03-01T12:00:10Z, has spec.schedulerName "default-scheduler", though MetadataPolicy team/sched (uid pol-3) generation 1 rule 0 sets "gantry-besteffort"`}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run(t, DefaultConfig(), tc.steps, tc.want)
		})
	}
}

func TestMetadataPolicyMemory(t *testing.T) {
	gen := func(g int64) *policyv1alpha1.MetadataPolicy {
		return mdp("gov", "pol-1", g).Rule(policyv1alpha1.PolicyPredicate{}, setLabel("governed", "true")).Obj()
	}
	c := NewChecker(DefaultConfig())
	c.Check(snapshot(step{0, []any{gen(1)}}))
	c.Check(snapshot(step{20 * time.Second, []any{gen(2), createdAt(10*time.Second, "p").Label("governed", "true").Obj()}}))
	if m := c.policies["pol-1"]; m == nil || len(m.generations) != 1 || m.generations[0].generation != 2 {
		t.Fatalf("the checker remembers %+v, want generation 2 only: no pod was created under generation 1", m)
	}
	c.Check(snapshot(step{30 * time.Second, []any{createdAt(10*time.Second, "p").Label("governed", "true").Obj()}}))
	if len(c.policies) != 0 {
		t.Errorf("the checker remembers %d policies, want none: the policy is gone and no pod was created under it", len(c.policies))
	}
	// A pod judged under generation 1 keeps it.
	c = NewChecker(DefaultConfig())
	p := createdAt(10*time.Second, "p").Label("governed", "true").Obj()
	c.Check(snapshot(step{0, []any{gen(1)}}))
	c.Check(snapshot(step{20 * time.Second, []any{gen(1), p}}))
	c.Check(snapshot(step{30 * time.Second, []any{gen(2), p}}))
	if m := c.policies["pol-1"]; m == nil || len(m.generations) != 2 {
		t.Errorf("the checker remembers %+v, want generations 1 and 2", m)
	}
	// A policy check per pod and policy, and one of what it sets.
	if got := c.Checks()[FamilyMetadataPolicy]; got != 4 {
		t.Errorf("%d MetadataPolicy checks made, want 4 (%s)", got, c.Checks())
	}
}
