package reservation

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestOwnerIndexLookup(t *testing.T) {
	byObject := &entry{r: makeReservation("obj", "1").Obj()}
	byObject.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{{Object: &schedv1alpha1.OwnerReference{Namespace: "ns", Name: "p1"}}})
	byUID := &entry{r: makeReservation("uid", "1").Obj()}
	byUID.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{{Object: &schedv1alpha1.OwnerReference{Namespace: "ns", Name: "p1", UID: "other"}}})
	byController := &entry{r: makeReservation("ctrl", "1").Obj()}
	byController.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{{Controller: &schedv1alpha1.OwnerReference{Namespace: "ns", Kind: "ReplicaSet", Name: "rs"}}})
	bySelector := &entry{r: makeReservation("sel", "1").Obj()}
	bySelector.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{{
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}},
		Namespace:     "ns",
	}})
	// An object owner for another incarnation of p1 (UID), or a selector:
	// found through the selector.
	uidOrSel := &entry{r: makeReservation("uid-or-sel", "1").Obj()}
	uidOrSel.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{
		{Object: &schedv1alpha1.OwnerReference{Namespace: "ns", Name: "p1", UID: "other"}},
		{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "a"}}, Namespace: "ns"},
	})
	// Two owners that both select p1: found once.
	both := &entry{r: makeReservation("both", "1").Obj()}
	both.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{
		{Object: &schedv1alpha1.OwnerReference{Namespace: "ns", Name: "p1"}},
		{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "a"}}, Namespace: "ns"},
	})

	// The consumers of a ProvisioningRequest, under either annotation key.
	byAnnotation := &entry{r: makeReservation("annot", "1").Obj()}
	byAnnotation.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{
		{Annotation: &schedv1alpha1.OwnerAnnotation{Key: "consume", Value: "req"}, Namespace: "ns"},
		{Annotation: &schedv1alpha1.OwnerAnnotation{Key: "consume-old", Value: "req"}, Namespace: "ns"},
	})

	// The members of a gang, and a booking that its members or a
	// request's consumers may use.
	byPodGroup := &entry{r: makeReservation("gang", "1").Obj()}
	byPodGroup.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{{PodGroup: "g", Namespace: "ns"}})
	gangOrAnnotation := &entry{r: makeReservation("gang-or-annot", "1").Obj()}
	gangOrAnnotation.owners, _ = compileOwners([]schedv1alpha1.ReservationOwner{
		{PodGroup: "g", Namespace: "ns"},
		{Annotation: &schedv1alpha1.OwnerAnnotation{Key: "consume", Value: "req"}, Namespace: "ns"},
	})
	entries := []*entry{byObject, byUID, byController, bySelector, both, uidOrSel, byAnnotation, byPodGroup, gangOrAnnotation}

	ix := newOwnerIndex()
	for _, e := range entries {
		ix.add(e)
	}
	tests := map[string]struct {
		pod  *v1.Pod
		want []string
	}{
		"object, selector, both": {wrappers.MakePod("p1", "ns").UID("u1").Label("tier", "a").Obj(), []string{"both", "obj", "sel", "uid-or-sel"}},
		"controller":             {wrappers.MakePod("p2", "ns").Controller("apps/v1", "ReplicaSet", "rs").Obj(), []string{"ctrl"}},
		"other namespace":        {wrappers.MakePod("p1", "other").Label("tier", "a").Controller("apps/v1", "ReplicaSet", "rs").Obj(), nil},
		"selector miss":          {wrappers.MakePod("p3", "ns").Label("tier", "c").Obj(), nil},
		"annotation":             {wrappers.MakePod("p4", "ns").Annotation("consume", "req").Obj(), []string{"annot", "gang-or-annot"}},
		"both annotations":       {wrappers.MakePod("p4", "ns").Annotation("consume", "req").Annotation("consume-old", "req").Obj(), []string{"annot", "gang-or-annot"}},
		"annotation value miss":  {wrappers.MakePod("p4", "ns").Annotation("consume", "other").Obj(), nil},
		"annotation namespace":   {wrappers.MakePod("p4", "other").Annotation("consume", "req").Obj(), nil},
		"gang member":            {wrappers.MakePod("p5", "ns").PodGroup("g").Obj(), []string{"gang", "gang-or-annot"}},
		"member consuming":       {wrappers.MakePod("p5", "ns").PodGroup("g").Annotation("consume", "req").Obj(), []string{"annot", "gang", "gang-or-annot"}},
		"other group":            {wrappers.MakePod("p5", "ns").PodGroup("h").Obj(), nil},
		"group's namespace":      {wrappers.MakePod("p5", "other").PodGroup("g").Obj(), nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			ix.lookup(tc.pod, func(e *entry) bool { got = append(got, e.r.Name); return true })
			if !equalSets(got, tc.want) {
				t.Errorf("owned = %v, want %v", got, tc.want)
			}
		})
	}
	for name, tc := range tests {
		var want []string
		for _, e := range entries {
			for _, c := range e.owners {
				if c.matches(tc.pod) {
					want = append(want, e.r.Name)
					break
				}
			}
		}
		if !equalSets(want, tc.want) {
			t.Errorf("%s: the owners matching one by one = %v, want %v", name, want, tc.want)
		}
	}
	for _, e := range entries {
		ix.remove(e)
	}
	if len(ix.byPod)+len(ix.byController)+len(ix.bySelector)+len(ix.byAnnotation)+len(ix.annotationKeys)+len(ix.byPodGroup) != 0 {
		t.Errorf("index not empty after removing everything: %+v", ix)
	}
}

func equalSets(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}
