package wrappers

import (
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodGroupWrapper wraps a PodGroup (scheduling.k8s.io/v1beta1, with the
// GenericWorkload gate).
type PodGroupWrapper struct{ schedulingv1beta1.PodGroup }

// MakePodGroup returns a PodGroup placed all or nothing: a gang of
// minCount members.
func MakePodGroup(name, namespace string, minCount int32) *PodGroupWrapper {
	return &PodGroupWrapper{schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount},
		}},
	}}
}

// PriorityClass sets the group's priority class.
func (w *PodGroupWrapper) PriorityClass(name string) *PodGroupWrapper {
	w.Spec.PriorityClassName = name
	return w
}

// Obj returns the PodGroup.
func (w *PodGroupWrapper) Obj() *schedulingv1beta1.PodGroup { return &w.PodGroup }
