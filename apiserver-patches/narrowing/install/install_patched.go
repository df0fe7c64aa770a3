//go:build gantry_patched

package install

import (
	"k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/gantry-dev/gantry/apiserver-patches/narrowing"
)

// Patched reports whether this binary was built against the patched
// k8s.io/kubernetes tree.
const Patched = true

// Install points upstream's validation hooks at Gantry's narrowing rules.
func Install() error {
	validation.ValidateGatedNodeAffinityMutation = narrowing.ValidateNodeAffinityMutation
	validation.ValidatePodTolerationsUpdate = narrowing.TolerationsUpdate(validation.ValidatePodTolerationsUpdate, validation.ValidateTolerations)
	return nil
}
