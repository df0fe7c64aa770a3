package narrowing

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
)

// TolerationsUpdateFunc validates the tolerations of a pod update; it has
// the shape of the hook Gantry's patch adds to upstream's validation
// package, whose options type O this package does not import.
type TolerationsUpdateFunc[O any] func(newPod, oldPod *core.Pod, fldPath *field.Path, opts O) field.ErrorList

// TolerationsUpdate returns the tolerations rule of Gantry's kube-apiserver:
// upstream's (existing tolerations stay, except for their tolerationSeconds;
// new ones may be added) and, while the old pod has scheduling gates, the
// dropping of tolerations too, which can only narrow where the pod fits. A
// changed toleration of a gated pod is the old one dropped plus a new one
// added, so it is accepted as well. validate is upstream's
// ValidateTolerations, applied to the new list either way.
func TolerationsUpdate[O any](upstream TolerationsUpdateFunc[O], validate func([]core.Toleration, *field.Path, O) field.ErrorList) TolerationsUpdateFunc[O] {
	return func(newPod, oldPod *core.Pod, fldPath *field.Path, opts O) field.ErrorList {
		if len(oldPod.Spec.SchedulingGates) == 0 {
			return upstream(newPod, oldPod, fldPath, opts)
		}
		return validate(newPod.Spec.Tolerations, fldPath, opts)
	}
}
