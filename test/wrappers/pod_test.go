package wrappers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodSetters(t *testing.T) {
	got := MakePod("p", "ns").
		Ports(v1.ContainerPort{ContainerPort: 80}, v1.ContainerPort{HostPort: 8080, ContainerPort: 8080}).
		AntiAffinityExists("app", v1.LabelHostname).
		ResourceClaims(v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-template")}).
		Phase(v1.PodSucceeded).
		Obj()

	want := MakePod("p", "ns").Obj()
	want.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80}, {HostPort: 8080, ContainerPort: 8080}}
	want.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists}}},
			TopologyKey:   v1.LabelHostname,
		}},
	}}
	want.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-template")}}
	want.Status.Phase = v1.PodSucceeded

	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod (-want +got):\n%s", diff)
	}
}

func TestPodAntiAffinityKeepsNodeAffinity(t *testing.T) {
	p := MakePod("p", "ns").OnNode("n1").AntiAffinityExists("app", v1.LabelHostname).Obj()
	if p.Spec.Affinity.NodeAffinity == nil {
		t.Error("AntiAffinityExists dropped the node affinity OnNode set")
	}
	if n := len(p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution); n != 1 {
		t.Errorf("%d required anti-affinity terms, want 1", n)
	}
}
