package engine

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// Finding 11: a policy that names a subresource would never apply (requests
// are matched on the resource); it is rejected when compiled.
func TestSubresourceTargetsRejected(t *testing.T) {
	spec := policyv1alpha1.MetadataPolicySpec{
		Targets: &policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Resource: "pods/status"}}},
		Rules:   []policyv1alpha1.MetadataPolicyRule{{PolicyAction: reject}},
	}
	_, errs := CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p"}, Spec: spec})
	if len(errs) != 1 || errs[0].Field != "spec.targets.resources[0]" || !strings.Contains(errs[0].Detail, "subresource") {
		t.Errorf("errors = %v, want one on spec.targets.resources[0] about subresources", errs)
	}
}

// Finding 23: the stand-in of an invalid policy rejects what the policy
// targets, in its scope only, and names the policy.
func TestInvalidStandIn(t *testing.T) {
	reason := strings.Repeat("x", 10*MaxInvalidReason)
	nsPolicy := Invalid(KindNamespaced, "team-a", "broken", 1, "", nil, nil, reason)
	cluster := Invalid(KindCluster, "", "broken", 1, policyv1alpha1.Enforce,
		&policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Resource: "configmaps"}}, Operations: []policyv1alpha1.Operation{"DELETE"}},
		sel("tier", "prod"), reason)
	configMap := func(ns string) *Object {
		return &Object{Operation: policyv1alpha1.Create, Resource: policyv1alpha1.GroupResource{Resource: "configmaps"}, Namespace: ns, NamespaceLabels: map[string]string{}}
	}
	audit := Invalid(KindNamespaced, "team-a", "audit", 1, policyv1alpha1.Audit, nil, nil, reason)
	tests := map[string]struct {
		policy       *Policy
		obj          *Object
		wantRejected bool
	}{
		"namespaced: its namespace's pods": {policy: nsPolicy, obj: pod("team-a", policyv1alpha1.Update), wantRejected: true},
		"namespaced: another namespace":    {policy: nsPolicy, obj: pod("team-b", policyv1alpha1.Create)},
		"cluster: a selected namespace":    {policy: cluster, obj: withNSLabels(configMap("a"), "tier", "prod"), wantRejected: true},
		"cluster: an untargeted resource":  {policy: cluster, obj: withNSLabels(pod("a", policyv1alpha1.Create), "tier", "prod")},
		"cluster: an unselected namespace": {policy: cluster, obj: withNSLabels(configMap("b"), "tier", "dev")},
		"audit: reported, never enforced":  {policy: audit, obj: pod("team-a", policyv1alpha1.Create)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := Evaluate([]*Policy{tc.policy}, tc.obj)
			if got := d.Enforced.Rejected(); got != tc.wantRejected {
				t.Fatalf("rejected = %v, want %v", got, tc.wantRejected)
			}
			if !tc.wantRejected {
				return
			}
			msg := d.Enforced.RejectionMessage()
			if !strings.Contains(msg, tc.policy.ID()+", which does not compile") || len(msg) > MaxReportedItemBytes+64 {
				t.Errorf("message (%d bytes) does not name %s or is unbounded: %.200s", len(msg), tc.policy.ID(), msg)
			}
		})
	}
	if d := Evaluate([]*Policy{audit}, pod("team-a", policyv1alpha1.Create)); !d.Audited.Rejected() {
		t.Error("an invalid audit policy is not reported")
	}
}
