package reservation

import (
	v1 "k8s.io/api/core/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// The accounting rules a reader of the API and of the REST services needs
// to tell what a reservation holds: the e2e suite checks the scheduler's
// cache with these, rather than with its own copy of them.

// AllocateOnce reports whether r is used up by its first owner:
// spec.allocateOnce, true when unset.
func AllocateOnce(r *schedv1alpha1.Reservation) bool {
	return r.Spec.AllocateOnce == nil || *r.Spec.AllocateOnce
}

// Consumed reports whether the API object shows r consumed: allocate-once,
// with an owner in status.currentOwners. The status controller moves such
// an Available reservation to Succeeded, and it holds nothing any more. (The
// store also counts owners it placed before status shows them.)
func Consumed(r *schedv1alpha1.Reservation) bool {
	return AllocateOnce(r) && len(r.Status.CurrentOwners) > 0
}

// Sum adds resource lists, per resource name; status.allocated is the Sum
// of the owners' requests.
func Sum(ls ...v1.ResourceList) v1.ResourceList { return sum(ls...) }
