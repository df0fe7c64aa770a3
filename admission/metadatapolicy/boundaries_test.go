package metadatapolicy

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/tools/record"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// requireOwner rejects pods of namespace ns without an owner label.
var requireOwner = policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
	{Key: "owner", Operator: metav1.LabelSelectorOpDoesNotExist}}}}

// forbidDebug rejects pods labelled debug=true.
var forbidDebug = policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"debug": "true"}}}

// testPlugin is a ready in-process plugin over the given policies.
func testPlugin(t *testing.T, policies ...*engine.Policy) *Plugin {
	t.Helper()
	s := NewSourceForTest()
	for _, p := range policies {
		s.AddForTest(p)
	}
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), source: s,
		reviewer: &Reviewer{Source: s, Recorder: record.NewFakeRecorder(100), Deployment: metrics.InProcess,
			NamespaceLabels: func(context.Context, string) (map[string]string, error) { return map[string]string{}, nil }}}
	p.SetReadyFunc(func() bool { return true })
	return p
}

func compileNS(t *testing.T, w *wrappers.MetadataPolicyWrapper) *engine.Policy {
	t.Helper()
	p, errs := engine.CompileNamespaced(w.Obj())
	if errs != nil {
		t.Fatal(errs)
	}
	return p
}

func testPod(labels map[string]string) *api.Pod {
	return &api.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a", Labels: labels}}
}

func podAttrs(obj, old *api.Pod, subresource string) admission.Attributes {
	op, opts := admission.Update, runtime.Object(&metav1.UpdateOptions{})
	var oldObj runtime.Object
	if old == nil {
		op, opts = admission.Create, &metav1.CreateOptions{}
	} else {
		oldObj = old
	}
	return admission.NewAttributesRecord(obj, oldObj, api.Kind("Pod").WithVersion("v1"), "team-a", "p",
		api.Resource("pods").WithVersion("v1"), subresource, op, opts, false, nil)
}

// Finding 11: a label change through pods/status is governed as through
// pods; a status update that leaves the metadata alone is not evaluated.
func TestSubresourceMetadataChanges(t *testing.T) {
	p := testPlugin(t, compileNS(t, wrappers.MakeMetadataPolicy("require-owner", "team-a").Rule(requireOwner, policyv1alpha1.PolicyAction{Reject: true})))
	withOwner := testPod(map[string]string{"owner": "alice", "app": "web"})
	tests := map[string]struct {
		obj, old    *api.Pod
		subresource string
		wantReject  bool
	}{
		"status update removing owner": {obj: testPod(map[string]string{"app": "web"}), old: withOwner, subresource: "status", wantReject: true},
		"status update keeping owner":  {obj: testPod(map[string]string{"owner": "bob", "app": "web"}), old: withOwner, subresource: "status"},
		// A pod created before the policy: its kubelet's status updates,
		// which leave the metadata alone, still pass.
		"status update of an old pod without owner": {obj: testPod(map[string]string{"app": "web"}), old: testPod(map[string]string{"app": "web"}), subresource: "status"},
		"ephemeralcontainers update removing owner": {obj: testPod(map[string]string{"app": "web"}), old: withOwner, subresource: "ephemeralcontainers", wantReject: true},
		"update removing owner":                     {obj: testPod(map[string]string{"app": "web"}), old: withOwner, wantReject: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := podAttrs(tc.obj, tc.old, tc.subresource)
			err := p.Admit(context.Background(), a, nil)
			if err == nil {
				err = p.Validate(context.Background(), a, nil)
			}
			if got := err != nil; got != tc.wantReject {
				t.Errorf("rejected = %v (%v), want %v", got, err, tc.wantReject)
			}
			if err != nil && !strings.Contains(err.Error(), "MetadataPolicy team-a/require-owner rule 0") {
				t.Errorf("the rejection does not name the policy: %v", err)
			}
		})
	}
}

// Finding 14: a label a later mutator adds after Admit is caught by
// Validate, which sees the final object.
func TestValidateRejectsWhatLaterMutatorsAdd(t *testing.T) {
	p := testPlugin(t, compileNS(t, wrappers.MakeMetadataPolicy("no-debug", "team-a").Rule(forbidDebug, policyv1alpha1.PolicyAction{Reject: true})))
	pod := testPod(map[string]string{"app": "web"})
	a := podAttrs(pod, nil, "")
	if err := p.Admit(context.Background(), a, nil); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	pod.Labels["debug"] = "true" // a mutating webhook or admission policy after the plugin
	err := p.Validate(context.Background(), a, nil)
	if err == nil || !strings.Contains(err.Error(), "MetadataPolicy team-a/no-debug rule 0") {
		t.Errorf("Validate = %v, want a rejection naming MetadataPolicy team-a/no-debug rule 0", err)
	}
}

// Finding 23: a Namespace is reviewed as itself, with its own labels, at
// CREATE as at UPDATE.
func TestNamespaceCreateAndUpdateAlike(t *testing.T) {
	obj := wrappers.MakeClusterMetadataPolicy("no-privileged-ns").
		Rule(policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}},
			policyv1alpha1.PolicyAction{Reject: true}).Obj()
	obj.Spec.Targets = &policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Resource: "namespaces"}}}
	policy, errs := engine.CompileCluster(obj)
	if errs != nil {
		t.Fatal(errs)
	}
	p := testPlugin(t, policy)
	ns := &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	for _, op := range []admission.Operation{admission.Create, admission.Update} {
		var old runtime.Object
		if op == admission.Update {
			old = &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}
		}
		// kube-apiserver gives a Namespace's CREATE no namespace, its UPDATE its own name.
		admNS := ""
		if op == admission.Update {
			admNS = "team-b"
		}
		a := admission.NewAttributesRecord(ns, old, api.Kind("Namespace").WithVersion("v1"), admNS, "team-b",
			api.Resource("namespaces").WithVersion("v1"), "", op, nil, false, nil)
		if err := p.Admit(context.Background(), a, nil); err == nil || !strings.Contains(err.Error(), "ClusterMetadataPolicy/no-privileged-ns") {
			t.Errorf("%s: Admit = %v, want the policy's rejection", op, err)
		}
	}
}

// Finding 23: a policy that no longer compiles keeps rejecting what it
// targets, naming itself, rather than silently admitting.
func TestInvalidPolicyFailsClosed(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": policyv1alpha1.SchemeGroupVersion.String(), "kind": "MetadataPolicy",
		"metadata": map[string]any{"name": "no-debug", "namespace": "team-a"},
		"spec": map[string]any{"rules": []any{map[string]any{
			"policyPredicate": map[string]any{"labelSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "debug", "operator": "Bogus"}}}},
			"policyAction":    map[string]any{"reject": true},
		}}},
	}}
	_, errs := Compile(u)
	if errs == nil {
		t.Fatal("the policy compiles: the test needs one that does not")
	}
	fallback := Fallback(u, errs.ToAggregate().Error())
	if fallback == nil {
		t.Fatal("no stand-in for an invalid policy with a reject rule")
	}
	p := testPlugin(t, fallback)
	err := p.Admit(context.Background(), podAttrs(testPod(map[string]string{"app": "web"}), nil, ""), nil)
	if err == nil || !strings.Contains(err.Error(), "MetadataPolicy team-a/no-debug, which does not compile") {
		t.Errorf("Admit = %v, want a rejection naming the invalid policy", err)
	}
	// Other namespaces are not affected.
	other := testPod(nil)
	other.Namespace = "team-b"
	a := admission.NewAttributesRecord(other, nil, api.Kind("Pod").WithVersion("v1"), "team-b", "p",
		api.Resource("pods").WithVersion("v1"), "", admission.Create, &metav1.CreateOptions{}, false, nil)
	if err := p.Admit(context.Background(), a, nil); err != nil {
		t.Errorf("Admit in another namespace = %v", err)
	}
	// Without a reject rule, an invalid policy is only reported.
	unstructured.RemoveNestedField(u.Object, "spec", "rules")
	if Fallback(u, "x") != nil {
		t.Error("a stand-in for an invalid policy without reject rules")
	}
}
