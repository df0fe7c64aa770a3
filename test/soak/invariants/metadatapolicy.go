package invariants

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Invariants of the MetadataPolicy family.
const (
	// InvariantPolicyNotApplied: a pod lacks a label or annotation a rule
	// in effect at its creation writes, or carries another value.
	InvariantPolicyNotApplied = "PolicyNotApplied"
	// InvariantRejectNotEnforced: a pod exists that a rejecting rule in
	// effect at its creation selects.
	InvariantRejectNotEnforced = "RejectNotEnforced"
	// InvariantSchedulerNotChosen: a pod's spec.schedulerName is not the
	// one a rule in effect at its creation sets.
	InvariantSchedulerNotChosen = "SchedulerNotChosen"
)

// policyMemory is what the checker saw of one MetadataPolicy, by UID.
type policyMemory struct {
	namespace, name string
	uid             types.UID
	// generations in the order first seen.
	generations []*policyGeneration
}

// policyGeneration is one generation of a policy: its spec as first seen,
// and the first and last snapshot that showed it.
type policyGeneration struct {
	generation  int64
	spec        policyv1alpha1.MetadataPolicySpec
	first, last time.Time
	// rules are the spec's rules with their selectors parsed; nil when one
	// does not parse (the policy does not compile, and is not judged).
	rules []policyRule
}

type policyRule struct {
	index               int
	labels, annotations labels.Selector
	action              policyv1alpha1.PolicyAction
}

func (m *policyMemory) ref() ObjectRef {
	return ObjectRef{Kind: "MetadataPolicy", Namespace: m.namespace, Name: m.name, UID: m.uid}
}

// observePolicies remembers the generations s shows.
func (c *Checker) observePolicies(ix *index) {
	for _, p := range ix.s.MetadataPolicies {
		m := c.policies[p.UID]
		if m == nil {
			m = &policyMemory{namespace: p.Namespace, name: p.Name, uid: p.UID}
			c.policies[p.UID] = m
		}
		i := slices.IndexFunc(m.generations, func(g *policyGeneration) bool { return g.generation == p.Generation })
		if i < 0 {
			g := &policyGeneration{generation: p.Generation, spec: *p.Spec.DeepCopy(), first: ix.now}
			g.rules = parseRules(&g.spec)
			m.generations = append(m.generations, g)
			i = len(m.generations) - 1
		}
		m.generations[i].last = ix.now
	}
}

// parseRules parses the selectors of spec's rules, as the engine compiles
// them (label selector semantics for both; nil matches everything); nil
// when one does not parse.
func parseRules(spec *policyv1alpha1.MetadataPolicySpec) []policyRule {
	out := make([]policyRule, 0, len(spec.Rules))
	for i, r := range spec.Rules {
		ls, err := parseSelector(r.PolicyPredicate.LabelSelector)
		if err != nil {
			return nil
		}
		as, err := parseSelector(r.PolicyPredicate.AnnotationSelector)
		if err != nil {
			return nil
		}
		out = append(out, policyRule{index: i, labels: ls, annotations: as, action: r.PolicyAction})
	}
	return out
}

func parseSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// enforcedOnPodCreate reports whether a generation acts on pods at CREATE:
// Enforce (the default), with targets that include pods and CREATE (the
// engine's DefaultTargets where the spec names none), and compiled.
func (g *policyGeneration) enforcedOnPodCreate() bool {
	if g.rules == nil || (g.spec.Enforcement != "" && g.spec.Enforcement != policyv1alpha1.Enforce) {
		return false
	}
	targets := engine.DefaultTargets
	if t := g.spec.Targets; t != nil {
		if len(t.Resources) > 0 {
			targets.Resources = t.Resources
		}
		if len(t.Operations) > 0 {
			targets.Operations = t.Operations
		}
	}
	return slices.Contains(targets.Resources, policyv1alpha1.GroupResource{Group: "", Resource: "pods"}) &&
		slices.Contains(targets.Operations, policyv1alpha1.Create)
}

// inEffectAt is the generation of m that was in effect throughout the
// creation of a pod created at t (a creation timestamp: t up to a second
// before the pod was stored), or nil when none is known to be: the
// checker saw it PolicyLag or more before t (by then the admission
// plugin's and the webhook's informers had it), and again Skew or more
// after t's second (the snapshot's lists may be Skew old, so a later
// generation may already have been in effect when one showed it), and saw
// no other generation of the policy meanwhile.
func (c *Checker) inEffectAt(m *policyMemory, t time.Time) *policyGeneration {
	for _, g := range m.generations {
		if g.first.After(t.Add(-c.cfg.PolicyLag)) || g.last.Before(t.Add(time.Second+c.cfg.Skew)) {
			continue
		}
		for _, other := range m.generations {
			if other != g && !other.last.Before(g.first) && !other.first.After(g.last) {
				return nil
			}
		}
		return g
	}
	return nil
}

// judgedPolicy is a policy generation judged for one pod.
type judgedPolicy struct {
	m *policyMemory
	g *policyGeneration
}

func (j judgedPolicy) String() string {
	return fmt.Sprintf("%s generation %d", j.m.ref(), j.g.generation)
}

// write is a value a rule sets.
type write struct {
	by    judgedPolicy
	rule  int
	value string
}

// checkMetadataPolicies judges each pod against the MetadataPolicies of its
// namespace that were in effect throughout its creation (inEffectAt),
// enforced on pods at CREATE. The engine evaluates a policy's rules against
// the pod as submitted (admission/metadatapolicy/engine Evaluate); the
// checker reads that from the pod's labels and annotations less every key a
// policy of the namespace writes, which is exact while no selector selects
// on such a key and the pod's labels and annotations are not changed after
// its creation: the soak workload keeps both. If a selecting rule rejects,
// the pod must not exist (RejectNotEnforced), and nothing else is judged
// (a rejection mutates nothing). Otherwise every label and annotation a
// selecting rule sets is on the pod with that value, the first writer
// winning in the engine's order (policies by name, rules by index), which
// matters only for rules of one policy while no two policies write one key
// with different values (PolicyNotApplied); and so is the schedulerName a
// selecting rule sets (SchedulerNotChosen). ClusterMetadataPolicies are
// not judged.
func (c *Checker) checkMetadataPolicies(ix *index) []Violation {
	c.observePolicies(ix)
	byNS := map[string][]*policyMemory{}
	written := map[string]map[string]bool{} // by namespace: label and annotation keys policies write
	for _, m := range c.policies {
		byNS[m.namespace] = append(byNS[m.namespace], m)
		if written[m.namespace] == nil {
			written[m.namespace] = map[string]bool{}
		}
		for _, g := range m.generations {
			for _, r := range g.spec.Rules {
				for k := range r.PolicyAction.UpdatedLabels {
					written[m.namespace]["label "+k] = true
				}
				for k := range r.PolicyAction.UpdatedAnnotations {
					written[m.namespace]["annotation "+k] = true
				}
			}
		}
	}
	for _, ms := range byNS {
		sort.Slice(ms, func(i, j int) bool {
			return ms[i].name < ms[j].name || ms[i].name == ms[j].name && ms[i].uid < ms[j].uid
		})
	}
	var out []Violation
	// judged: the generations some pod of this snapshot was created under.
	judged := map[*policyGeneration]bool{}
	for _, p := range ix.s.Pods {
		t := p.CreationTimestamp.Time
		if t.IsZero() {
			continue
		}
		var policies []judgedPolicy
		for _, m := range byNS[p.Namespace] {
			if g := c.inEffectAt(m, t); g != nil {
				judged[g] = true
				if g.enforcedOnPodCreate() {
					policies = append(policies, judgedPolicy{m, g})
				}
			}
		}
		if len(policies) > 0 {
			out = append(out, c.judgePod(ix, p, policies, written[p.Namespace])...)
		}
	}
	c.forgetPolicies(ix.now, judged)
	return out
}

// forgetPolicies forgets the generations that no longer matter: not shown
// at now, no pod of the snapshot created under them (pods created later
// are judged against later generations), and last seen before every other
// generation of their policy the checker remembers was first seen (so a
// forgotten one was never seen between two sightings of one it keeps).
func (c *Checker) forgetPolicies(now time.Time, judged map[*policyGeneration]bool) {
	for uid, m := range c.policies {
		var keep []*policyGeneration
		for _, g := range m.generations {
			needed := !g.last.Before(now) || judged[g]
			for _, other := range m.generations {
				needed = needed || other != g && !other.first.After(g.last)
			}
			if needed {
				keep = append(keep, g)
			}
		}
		m.generations = keep
		if len(keep) == 0 {
			delete(c.policies, uid)
		}
	}
}

// judgePod judges p against the policies in effect at its creation, in
// the engine's order.
func (c *Checker) judgePod(ix *index, p *v1.Pod, policies []judgedPolicy, written map[string]bool) []Violation {
	submittedLabels, submittedAnnotations := labels.Set{}, labels.Set{}
	for k, v := range p.Labels {
		if !written["label "+k] {
			submittedLabels[k] = v
		}
	}
	for k, v := range p.Annotations {
		if !written["annotation "+k] {
			submittedAnnotations[k] = v
		}
	}
	created := p.CreationTimestamp.Time
	var out []Violation
	rejected := false
	var labelWrites, annotationWrites map[string]write
	var scheduler *write
	for _, jp := range policies {
		c.checks[FamilyMetadataPolicy]++ // RejectNotEnforced
		var rejecting []string
		for _, r := range jp.g.rules {
			if !r.labels.Matches(submittedLabels) || !r.annotations.Matches(submittedAnnotations) {
				continue
			}
			if r.action.Reject {
				rejecting = append(rejecting, fmt.Sprint(r.index))
				continue
			}
			for k, v := range r.action.UpdatedLabels {
				labelWrites = firstWrite(labelWrites, k, write{jp, r.index, string(v)})
			}
			for k, v := range r.action.UpdatedAnnotations {
				annotationWrites = firstWrite(annotationWrites, k, write{jp, r.index, string(v)})
			}
			if r.action.SchedulerName != "" && scheduler == nil {
				scheduler = &write{jp, r.index, r.action.SchedulerName}
			}
		}
		if len(rejecting) == 0 {
			continue
		}
		rejected = true
		since := c.since("rejected/"+string(p.UID)+"/"+string(jp.m.uid), ix.now)
		out = append(out, c.report(string(p.UID)+"/"+string(jp.m.uid), Violation{
			Family: FamilyMetadataPolicy, Invariant: InvariantRejectNotEnforced, Objects: []ObjectRef{podRef(p), jp.m.ref()},
			Since: since, Seen: ix.now,
			Message: fmt.Sprintf("%s exists, created at %s, though %s rule %s rejects it: %s; first seen at %s, still at %s",
				podRef(p), stamp(created), jp, strings.Join(rejecting, ", "), c.inEffectPhrase(jp), stamp(since), stamp(ix.now)),
		})...)
	}
	if rejected {
		return out
	}
	// What each policy set and the pod lacks, by the policy that set it.
	missing := map[*policyMemory][]string{}
	setters := map[*policyMemory]bool{}
	for _, w := range []struct {
		what   string
		writes map[string]write
		have   map[string]string
	}{{"label", labelWrites, p.Labels}, {"annotation", annotationWrites, p.Annotations}} {
		for k, wr := range w.writes {
			setters[wr.by.m] = true
			if got, ok := w.have[k]; !ok {
				missing[wr.by.m] = append(missing[wr.by.m], fmt.Sprintf("rule %d sets %s %s=%q, which the pod lacks", wr.rule, w.what, k, wr.value))
			} else if got != wr.value {
				missing[wr.by.m] = append(missing[wr.by.m], fmt.Sprintf("rule %d sets %s %s=%q, the pod has %q", wr.rule, w.what, k, wr.value, got))
			}
		}
	}
	for _, jp := range policies {
		if !setters[jp.m] {
			continue
		}
		c.checks[FamilyMetadataPolicy]++ // PolicyNotApplied
		problems := missing[jp.m]
		if len(problems) == 0 {
			continue
		}
		sort.Strings(problems)
		since := c.since("not-applied/"+string(p.UID)+"/"+string(jp.m.uid), ix.now)
		out = append(out, c.report(string(p.UID)+"/"+string(jp.m.uid), Violation{
			Family: FamilyMetadataPolicy, Invariant: InvariantPolicyNotApplied, Objects: []ObjectRef{podRef(p), jp.m.ref()},
			Since: since, Seen: ix.now,
			Message: fmt.Sprintf("%s, created at %s, lacks what %s sets: %s; %s; first seen at %s, still at %s",
				podRef(p), stamp(created), jp, strings.Join(problems, "; "), c.inEffectPhrase(jp), stamp(since), stamp(ix.now)),
		})...)
	}
	if scheduler != nil {
		c.checks[FamilyMetadataPolicy]++ // SchedulerNotChosen
		if got := p.Spec.SchedulerName; got != scheduler.value {
			jp := scheduler.by
			since := c.since("scheduler/"+string(p.UID), ix.now)
			out = append(out, c.report(string(p.UID), Violation{
				Family: FamilyMetadataPolicy, Invariant: InvariantSchedulerNotChosen, Objects: []ObjectRef{podRef(p), jp.m.ref()},
				Since: since, Seen: ix.now,
				Message: fmt.Sprintf("%s, created at %s, has spec.schedulerName %q, though %s rule %d sets %q; %s; first seen at %s, still at %s",
					podRef(p), stamp(created), got, jp, scheduler.rule, scheduler.value, c.inEffectPhrase(jp), stamp(since), stamp(ix.now)),
			})...)
		}
	}
	return out
}

// firstWrite records w under key unless an earlier rule wrote the key: the
// engine keeps the first writer's value.
func firstWrite(writes map[string]write, key string, w write) map[string]write {
	if writes == nil {
		writes = map[string]write{}
	}
	if _, ok := writes[key]; !ok {
		writes[key] = w
	}
	return writes
}

// inEffectPhrase says why jp was in effect at a pod's creation.
func (c *Checker) inEffectPhrase(jp judgedPolicy) string {
	return fmt.Sprintf("the checker saw that generation from %s to %s and no other meanwhile, so it was in effect (allowing %s for the admission informers) throughout the pod's creation",
		stamp(jp.g.first), stamp(jp.g.last), c.cfg.PolicyLag)
}
