//go:build gantry_patched

package install

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/gantry-dev/gantry/apiserver-patches/narrowing"
)

// Patched reports whether this binary was built against the patched
// k8s.io/kubernetes tree.
const Patched = true

// Install points upstream's validation hooks at Gantry's narrowing rules.
func Install() error {
	validation.ValidateGatedNodeAffinityMutation = narrowing.ValidateNodeAffinityMutation
	// As upstream's update path: the key's format is declaratively
	// validated too, and the handwritten error marks it so.
	validate := func(t []core.Toleration, p *field.Path, opts validation.PodValidationOptions) field.ErrorList {
		return validation.ValidateTolerations(t, p, opts, validation.KeyFormatCovered)
	}
	validation.ValidatePodTolerationsUpdate = narrowing.TolerationsUpdate(validation.ValidatePodTolerationsUpdate, validate)
	return nil
}
