package v1alpha1

import v1 "k8s.io/api/core/v1"

// PodGroupOf is the PodGroup that pod's spec.schedulingGroup names (the
// gang it belongs to, which a PodGroup owner selects), "" for none.
func PodGroupOf(pod *v1.Pod) string {
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		return *g.PodGroupName
	}
	return ""
}
