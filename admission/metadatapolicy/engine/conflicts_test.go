package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

func TestConflicts(t *testing.T) {
	a := nsPolicy("ns", "a").rule(everything, setLabels("team", "x")).compile(t)
	b := nsPolicy("ns", "b").rule(everything, setLabels("team", "y")).compile(t)
	same := nsPolicy("ns", "same").rule(everything, setLabels("team", "x")).compile(t)
	other := nsPolicy("other", "c").rule(everything, setLabels("team", "z")).compile(t)
	audit := nsPolicy("ns", "audit").audit().rule(everything, setLabels("team", "w")).compile(t)
	prod := clusterPolicy("prod").namespaces(sel("env", "prod")).rule(everything, setLabels("team", "p")).compile(t)
	configmaps := nsPolicy("ns", "cm").targets(policyv1alpha1.Targets{Resources: []policyv1alpha1.GroupResource{{Resource: "configmaps"}}}).
		rule(everything, setLabels("team", "q")).compile(t)

	nsLabels := func(ns string) (map[string]string, bool) {
		return map[string]map[string]string{"ns": {"env": "dev"}, "other": {"env": "prod"}}[ns], true
	}
	got := Conflicts([]*Policy{a, b, same, other, audit, prod, configmaps}, nsLabels)
	want := map[*Policy][]string{
		a:     {`label team: MetadataPolicy ns/b rule 0 writes "y" (this policy's rule 0 writes "x")`},
		b:     {`label team: MetadataPolicy ns/a rule 0 writes "x" (this policy's rule 0 writes "y")`, `label team: MetadataPolicy ns/same rule 0 writes "x" (this policy's rule 0 writes "y")`},
		same:  {`label team: MetadataPolicy ns/b rule 0 writes "y" (this policy's rule 0 writes "x")`},
		other: {`label team: ClusterMetadataPolicy/prod rule 0 writes "p" (this policy's rule 0 writes "z")`},
		prod:  {`label team: MetadataPolicy other/c rule 0 writes "z" (this policy's rule 0 writes "p")`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
}
