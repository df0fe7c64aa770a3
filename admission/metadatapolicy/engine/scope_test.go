package engine

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// A tenant's MetadataPolicy targeting a cluster-scoped resource (its own
// Namespace above all) is rejected when it is created, naming the field.
func TestNamespacedPolicyRejectsClusterScopedTargets(t *testing.T) {
	for _, gr := range []policyv1alpha1.GroupResource{
		{Resource: "namespaces"},
		{Resource: "nodes"},
		{Group: "scheduling.gantry.dev", Resource: "reservations"},
		{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
	} {
		t.Run(gr.Resource, func(t *testing.T) {
			spec := policyv1alpha1.MetadataPolicySpec{
				Targets: &policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Resource: "pods"}, gr}},
				Rules:   []policyv1alpha1.MetadataPolicyRule{{PolicyAction: setLabels("pod-security.kubernetes.io/enforce", "privileged")}},
			}
			p, errs := CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "escalate"}, Spec: spec})
			if p != nil || len(errs) != 1 {
				t.Fatalf("CompileNamespaced = %v, %v; want one error", p, errs)
			}
			if got := errs[0].Field; got != "spec.targets.resources[1]" {
				t.Errorf("error field = %q, want spec.targets.resources[1]", got)
			}
			if !strings.Contains(errs[0].Error(), "ClusterMetadataPolicy") {
				t.Errorf("error %q does not point to ClusterMetadataPolicy", errs[0].Error())
			}
			// An admin's ClusterMetadataPolicy keeps accepting the target.
			if _, errs := CompileCluster(&policyv1alpha1.ClusterMetadataPolicy{ObjectMeta: metav1.ObjectMeta{Name: "admin"},
				Spec: policyv1alpha1.ClusterMetadataPolicySpec{MetadataPolicySpec: spec}}); len(errs) != 0 {
				t.Errorf("CompileCluster: %v", errs)
			}
		})
	}
}

// Defence in depth: a namespaced policy that targets a cluster-scoped
// resource (loaded before the compile-time check, or a resource the list
// does not know) never applies to such an object.
func TestNamespacedPolicySkipsClusterScopedObjects(t *testing.T) {
	widgets := policyv1alpha1.GroupResource{Group: "example.com", Resource: "widgets"}
	namespaces := policyv1alpha1.GroupResource{Resource: "namespaces"}
	tenant := nsPolicy("team-a", "tenant").targets(policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{widgets}}).
		rule(everything, setLabels("role", "monitoring")).compile(t)
	tenant.resources = sets.New(widgets, namespaces) // as if compiled by an older engine
	admin := clusterPolicy("admin").targets(policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{namespaces}}).
		rule(everything, setLabels("owner", "platform")).compile(t)
	policies := []*Policy{admin, tenant}

	// kube-apiserver admits an update of Namespace team-a with namespace team-a.
	ns := &Object{Operation: policyv1alpha1.Update, Resource: namespaces, Namespace: "team-a",
		NamespaceLabels: map[string]string{NamespaceNameLabel: "team-a"}}
	d := Evaluate(policies, ns)
	if got := writes(d.Enforced); len(got) != 1 || got[0] != "label owner=platform by ClusterMetadataPolicy/admin rule 0" {
		t.Errorf("namespace update writes %v; want only the ClusterMetadataPolicy's", got)
	}
	for _, m := range d.Enforced.Matched {
		if m.Policy == tenant {
			t.Errorf("the tenant's policy applied to its Namespace: %v", m)
		}
	}
	widget := &Object{Operation: policyv1alpha1.Update, Resource: widgets}
	if d := Evaluate(policies, widget); len(d.Enforced.Matched) != 0 {
		t.Errorf("the tenant's policy applied to a cluster-scoped widget: %v", d.Enforced.Matched)
	}
	// The same resource in the tenant's namespace is still governed.
	widget.Namespace = "team-a"
	if d := Evaluate(policies, widget); len(d.Enforced.Matched) != 1 {
		t.Errorf("namespaced widget matched %v; want the tenant's rule", d.Enforced.Matched)
	}
}
