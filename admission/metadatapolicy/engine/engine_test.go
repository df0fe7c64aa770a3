package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// policyWrapper builds policies for tests.
type policyWrapper struct {
	ns, name string
	spec     policyv1alpha1.ClusterMetadataPolicySpec
}

func nsPolicy(ns, name string) *policyWrapper  { return &policyWrapper{ns: ns, name: name} }
func clusterPolicy(name string) *policyWrapper { return &policyWrapper{name: name} }

func (w *policyWrapper) rule(pred policyv1alpha1.PolicyPredicate, act policyv1alpha1.PolicyAction) *policyWrapper {
	w.spec.Rules = append(w.spec.Rules, policyv1alpha1.MetadataPolicyRule{PolicyPredicate: pred, PolicyAction: act})
	return w
}

func (w *policyWrapper) audit() *policyWrapper {
	w.spec.Enforcement = policyv1alpha1.Audit
	return w
}

func (w *policyWrapper) targets(t policyv1alpha1.Targets) *policyWrapper {
	w.spec.Targets = &t
	return w
}

func (w *policyWrapper) namespaces(s *metav1.LabelSelector) *policyWrapper {
	w.spec.NamespaceSelector = s
	return w
}

func (w *policyWrapper) compile(t *testing.T) *Policy {
	t.Helper()
	var p *Policy
	var errs field.ErrorList
	if w.ns == "" {
		p, errs = CompileCluster(&policyv1alpha1.ClusterMetadataPolicy{ObjectMeta: metav1.ObjectMeta{Name: w.name}, Spec: w.spec})
	} else {
		p, errs = CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.ns}, Spec: w.spec.MetadataPolicySpec})
	}
	if len(errs) > 0 {
		t.Fatalf("compiling %s: %v", w.name, errs)
	}
	return p
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func setLabels(kv ...string) policyv1alpha1.PolicyAction {
	m := map[string]policyv1alpha1.LabelValue{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = policyv1alpha1.LabelValue(kv[i+1])
	}
	return policyv1alpha1.PolicyAction{UpdatedLabels: m}
}

var (
	everything = policyv1alpha1.PolicyPredicate{}
	reject     = policyv1alpha1.PolicyAction{Reject: true}
)

func pod(ns string, op policyv1alpha1.Operation, kv ...string) *Object {
	o := &Object{Operation: op, Resource: policyv1alpha1.GroupResource{Resource: "pods"}, Namespace: ns, Pod: true,
		Labels: map[string]string{}, Annotations: map[string]string{}, NamespaceLabels: map[string]string{NamespaceNameLabel: ns}}
	for i := 0; i+1 < len(kv); i += 2 {
		o.Labels[kv[i]] = kv[i+1]
	}
	return o
}

func writes(o Outcome) []string {
	var out []string
	for _, w := range o.Writes {
		out = append(out, w.target()+"="+w.Value+" by "+w.By.String())
	}
	return out
}

func TestDefaultingRequiringForbidding(t *testing.T) {
	policies := []*Policy{
		nsPolicy("team-a", "default-tier").rule(
			policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}},
			setLabels("tier", "standard")).compile(t),
		nsPolicy("team-a", "require-owner").rule(
			policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "owner", Operator: metav1.LabelSelectorOpDoesNotExist}}}},
			reject).compile(t),
	}
	Sort(policies)

	d := Evaluate(policies, pod("team-a", policyv1alpha1.Create, "owner", "ann"))
	if diff := cmp.Diff([]string{"label tier=standard by MetadataPolicy team-a/default-tier rule 0"}, writes(d.Enforced)); diff != "" || d.Enforced.Rejected() {
		t.Errorf("defaulting (-want +got):\n%s rejected=%v", diff, d.Enforced.Rejected())
	}

	d = Evaluate(policies, pod("team-a", policyv1alpha1.Create))
	if !d.Enforced.Rejected() || len(d.Enforced.Writes) != 0 {
		t.Fatalf("a pod without owner must be rejected without mutation: %+v", d.Enforced)
	}
	if msg := d.Enforced.RejectionMessage(); msg != "rejected by MetadataPolicy team-a/require-owner rule 0" {
		t.Errorf("message = %q", msg)
	}

	if d := Evaluate(policies, pod("team-b", policyv1alpha1.Create)); len(d.Enforced.Matched) != 0 {
		t.Errorf("namespaced policies applied outside their namespace: %v", d.Enforced.Matched)
	}
}

func TestConflictsResolveInDocumentedOrder(t *testing.T) {
	policies := []*Policy{
		nsPolicy("ns", "a-local").rule(everything, setLabels("team", "local")).compile(t),
		clusterPolicy("z-cluster").rule(everything, setLabels("team", "cluster")).compile(t),
		nsPolicy("ns", "b-local").rule(everything, setLabels("team", "local")).rule(everything, setLabels("team", "b1")).compile(t),
	}
	Sort(policies)
	d := Evaluate(policies, pod("ns", policyv1alpha1.Create))
	if diff := cmp.Diff([]string{"label team=cluster by ClusterMetadataPolicy/z-cluster rule 0"}, writes(d.Enforced)); diff != "" {
		t.Errorf("winner (-want +got):\n%s", diff)
	}
	var got []string
	for _, c := range d.Enforced.Conflicts {
		got = append(got, c.String())
	}
	want := []string{
		`label team: ClusterMetadataPolicy/z-cluster rule 0 sets "cluster", overriding MetadataPolicy ns/a-local rule 0 which sets "local"`,
		`label team: ClusterMetadataPolicy/z-cluster rule 0 sets "cluster", overriding MetadataPolicy ns/b-local rule 0 which sets "local"`,
		`label team: ClusterMetadataPolicy/z-cluster rule 0 sets "cluster", overriding MetadataPolicy ns/b-local rule 1 which sets "b1"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	// The same policies in any input order decide the same after Sort.
	rev := []*Policy{policies[2], policies[1], policies[0]}
	Sort(rev)
	if diff := cmp.Diff(writes(d.Enforced), writes(Evaluate(rev, pod("ns", policyv1alpha1.Create)).Enforced)); diff != "" {
		t.Errorf("order changed the outcome:\n%s", diff)
	}
}

func TestSameValueIsNoConflict(t *testing.T) {
	policies := []*Policy{
		nsPolicy("ns", "a").rule(everything, setLabels("team", "x")).compile(t),
		nsPolicy("ns", "b").rule(everything, setLabels("team", "x")).compile(t),
	}
	d := Evaluate(policies, pod("ns", policyv1alpha1.Create))
	if len(d.Enforced.Conflicts) != 0 || len(d.Enforced.Writes) != 1 {
		t.Errorf("same value: writes %v conflicts %v", writes(d.Enforced), d.Enforced.Conflicts)
	}
}

func TestAuditChangesNothing(t *testing.T) {
	policies := []*Policy{
		nsPolicy("ns", "would-reject").audit().rule(everything, reject).compile(t),
		nsPolicy("ns", "would-label").audit().rule(everything, setLabels("x", "y")).compile(t),
	}
	d := Evaluate(policies, pod("ns", policyv1alpha1.Create))
	if d.Enforced.Rejected() || len(d.Enforced.Writes) != 0 {
		t.Errorf("audit policies acted: %+v", d.Enforced)
	}
	if !d.Audited.Rejected() || d.Audited.Summary() != "rejected by MetadataPolicy ns/would-reject rule 0" {
		t.Errorf("audit outcome = %q", d.Audited.Summary())
	}
}

func TestSchedulerNameAtCreateOnly(t *testing.T) {
	p := nsPolicy("ns", "route").rule(
		policyv1alpha1.PolicyPredicate{AnnotationSelector: sel("scheduler.alpha.kubernetes.io/qos", "BestEffort")},
		policyv1alpha1.PolicyAction{SchedulerName: "best-effort"}).
		targets(policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "deployments"}}}).compile(t)
	obj := pod("ns", policyv1alpha1.Create)
	obj.Annotations["scheduler.alpha.kubernetes.io/qos"] = "BestEffort"
	if _, _, s := Evaluate([]*Policy{p}, obj).Enforced.Changes(obj); s != "best-effort" {
		t.Errorf("CREATE: schedulerName = %q", s)
	}
	obj.Operation = policyv1alpha1.Update
	d := Evaluate([]*Policy{p}, obj)
	if _, _, s := d.Enforced.Changes(obj); s != "" || len(d.Enforced.Ignored) != 1 || !strings.Contains(d.Enforced.Ignored[0], "CREATE only") {
		t.Errorf("UPDATE: schedulerName %q, ignored %v", s, d.Enforced.Ignored)
	}
	obj.Operation, obj.Pod, obj.Resource = policyv1alpha1.Create, false, policyv1alpha1.GroupResource{Group: "apps", Resource: "deployments"}
	if d := Evaluate([]*Policy{p}, obj); len(d.Enforced.Writes) != 0 || len(d.Enforced.Ignored) != 1 {
		t.Errorf("deployment: writes %v ignored %v", writes(d.Enforced), d.Enforced.Ignored)
	}
}

func TestTargets(t *testing.T) {
	p := nsPolicy("ns", "updates-only").targets(policyv1alpha1.Targets{Operations: []policyv1alpha1.Operation{policyv1alpha1.Update}}).
		rule(everything, setLabels("x", "y")).compile(t)
	if d := Evaluate([]*Policy{p}, pod("ns", policyv1alpha1.Create)); len(d.Enforced.Matched) != 0 {
		t.Errorf("UPDATE-only policy matched a CREATE")
	}
	if d := Evaluate([]*Policy{p}, pod("ns", policyv1alpha1.Update)); len(d.Enforced.Matched) != 1 {
		t.Errorf("UPDATE-only policy did not match an UPDATE")
	}
	cm := pod("ns", policyv1alpha1.Update)
	cm.Resource, cm.Pod = policyv1alpha1.GroupResource{Resource: "configmaps"}, false
	if d := Evaluate([]*Policy{p}, cm); len(d.Enforced.Matched) != 0 {
		t.Errorf("pods-only policy matched a configmap")
	}
}

func TestClusterPolicyNamespaces(t *testing.T) {
	all := clusterPolicy("all").rule(everything, setLabels("x", "y")).compile(t)
	prod := clusterPolicy("prod").namespaces(sel("env", "prod")).rule(everything, setLabels("x", "y")).compile(t)
	kubeSystem := clusterPolicy("kube-system").namespaces(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: NamespaceNameLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"kube-system"}}}}).rule(everything, setLabels("x", "y")).compile(t)
	for name, tc := range map[string]struct {
		p    *Policy
		obj  *Object
		want bool
	}{
		"all selects a user namespace":        {all, pod("team-a", policyv1alpha1.Create), true},
		"all skips kube-system":               {all, pod("kube-system", policyv1alpha1.Create), false},
		"selector matches namespace labels":   {prod, withNSLabels(pod("web", policyv1alpha1.Create), "env", "prod"), true},
		"selector rejects other namespaces":   {prod, withNSLabels(pod("web", policyv1alpha1.Create), "env", "dev"), false},
		"kube-system when named explicitly":   {kubeSystem, pod("kube-system", policyv1alpha1.Create), true},
		"cluster-scoped objects are excluded": {all, pod("", policyv1alpha1.Create), false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.p.Applies(tc.obj); got != tc.want {
				t.Errorf("Applies = %v, want %v", got, tc.want)
			}
		})
	}
}

func withNSLabels(o *Object, kv ...string) *Object {
	for i := 0; i+1 < len(kv); i += 2 {
		o.NamespaceLabels[kv[i]] = kv[i+1]
	}
	return o
}

func TestCompileErrorsNameTheField(t *testing.T) {
	for name, tc := range map[string]struct {
		spec policyv1alpha1.MetadataPolicySpec
		want string
	}{
		"reject with mutation": {policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{PolicyAction: policyv1alpha1.PolicyAction{Reject: true, SchedulerName: "x"}}}}, "spec.rules[0].policyAction"},
		"empty action":         {policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{}}}, "spec.rules[0].policyAction: Required"},
		"bad label key":        {policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{PolicyAction: setLabels("not a key", "v")}}}, "spec.rules[0].policyAction.updatedLabels[not a key]"},
		"bad label value":      {policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{PolicyAction: setLabels("k", "-bad-")}}}, "spec.rules[0].policyAction.updatedLabels[k]"},
		"bad annotation key":   {policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{PolicyAction: policyv1alpha1.PolicyAction{UpdatedAnnotations: map[string]policyv1alpha1.AnnotationValue{"a/b/c": "x"}}}}}, "spec.rules[0].policyAction.updatedAnnotations[a/b/c]"},
		"bad selector": {policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{
			PolicyPredicate: policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}},
			PolicyAction:    reject}}}, "spec.rules[0].policyPredicate.labelSelector"},
		"no rules":        {policyv1alpha1.MetadataPolicySpec{}, "spec.rules: Required"},
		"bad enforcement": {policyv1alpha1.MetadataPolicySpec{Enforcement: "Sometimes", Rules: []policyv1alpha1.MetadataPolicyRule{{PolicyAction: reject}}}, "spec.enforcement"},
		"bad scheduler":   {policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{PolicyAction: policyv1alpha1.PolicyAction{SchedulerName: "Bad_Name"}}}}, "spec.rules[0].policyAction.schedulerName"},
		"too many rules":  {policyv1alpha1.MetadataPolicySpec{Rules: make([]policyv1alpha1.MetadataPolicyRule, policyv1alpha1.MaxRules+1)}, "spec.rules: Too many"},
	} {
		t.Run(name, func(t *testing.T) {
			_, errs := CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: tc.spec})
			if errs == nil || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors %v, want one containing %q", errs, tc.want)
			}
		})
	}
}

// FuzzEngine feeds arbitrary policy specs and objects to the engine: it must
// not panic, and its outcome must keep its invariants.
func FuzzEngine(f *testing.F) {
	f.Add([]byte(`{"rules":[{"policyPredicate":{"labelSelector":{"matchLabels":{"a":"b"}}},"policyAction":{"updatedLabels":{"x":"y"}}}]}`),
		[]byte(`{"rules":[{"policyAction":{"reject":true}}],"enforcement":"Audit"}`), []byte(`{"a":"b","x":"z"}`), true)
	f.Add([]byte(`{"rules":[{"policyAction":{"schedulerName":"s"}},{"policyAction":{"schedulerName":"t"}}]}`),
		[]byte(`{"namespaceSelector":{"matchExpressions":[{"key":"k","operator":"Exists"}]},"rules":[{"policyAction":{"updatedAnnotations":{"q":"r"}}}]}`), []byte(`{}`), false)
	f.Fuzz(func(t *testing.T, nsSpec, clusterSpec, objLabels []byte, create bool) {
		var a policyv1alpha1.MetadataPolicySpec
		var c policyv1alpha1.ClusterMetadataPolicySpec
		var l map[string]string
		if json.Unmarshal(nsSpec, &a) != nil || json.Unmarshal(clusterSpec, &c) != nil || json.Unmarshal(objLabels, &l) != nil {
			return
		}
		var policies []*Policy
		if p, errs := CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}, Spec: a}); errs == nil {
			policies = append(policies, p)
		}
		if p, errs := CompileCluster(&policyv1alpha1.ClusterMetadataPolicy{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: c}); errs == nil {
			policies = append(policies, p)
		}
		Sort(policies)
		op := policyv1alpha1.Update
		if create {
			op = policyv1alpha1.Create
		}
		obj := pod("ns", op)
		obj.Labels, obj.Annotations = l, l
		d := Evaluate(policies, obj)
		for _, out := range []Outcome{d.Enforced, d.Audited} {
			keys := map[string]bool{}
			for _, w := range out.Writes {
				if keys[w.target()] {
					t.Fatalf("key %s written twice", w.target())
				}
				keys[w.target()] = true
			}
			for _, c := range out.Conflicts {
				if c.Winner.Value == c.Loser.Value {
					t.Fatalf("conflict between equal values: %v", c)
				}
			}
		}
		if d.Enforced.Rejected() && len(d.Enforced.Writes) > 0 {
			t.Fatalf("rejection with mutations")
		}
	})
}
