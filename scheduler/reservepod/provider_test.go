package reservepod

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

type fakeProvider struct{}

func (fakeProvider) NominatedOn(string) []*v1.Pod            { return nil }
func (fakeProvider) ClearNomination(types.UID)               {}
func (fakeProvider) AllocatedPriority(*v1.Pod) (int32, bool) { return 0, false }

// The Provider is found in the scheduler it was provided to, and only
// there; a scheduler without one has nil, which VictimPriority takes as
// "no pod is placed in a reservation".
func TestProviderOf(t *testing.T) {
	a, b := frameworkext.New(), frameworkext.New()
	if p := ProviderOf(a); p != nil {
		t.Fatalf("Provider before any was provided: %v", p)
	}
	Provide(a, fakeProvider{})
	if p := ProviderOf(a); p != (fakeProvider{}) {
		t.Errorf("ProviderOf = %v, want the one provided", p)
	}
	if p := ProviderOf(b); p != nil {
		t.Errorf("another scheduler sees a Provider: %v", p)
	}
	var none Provider
	prio := int32(3)
	p := &v1.Pod{Spec: v1.PodSpec{Priority: &prio, NodeName: "n1"}}
	p.Annotations = map[string]string{schedv1alpha1.AnnotationAllocated: `{"name":"r","uid":"u","priority":100}`}
	if got := VictimPriority(p, none); got != 3 {
		t.Errorf("VictimPriority without a Provider = %d, want the pod's own 3", got)
	}
}
