package reservation

import (
	"time"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// The accounting rules a reader of the API and of the REST services needs
// to tell what a reservation holds. The plugin, its status controller and
// the e2e suite all use these (and Sum, in helpers.go); none has a copy.

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

// Expiry is when r expires: spec.expires, else its creation plus spec.ttl;
// false when it sets neither.
func Expiry(r *schedv1alpha1.Reservation) (time.Time, bool) {
	switch {
	case r.Spec.Expires != nil:
		return r.Spec.Expires.Time, true
	case r.Spec.TTL != nil:
		return r.CreationTimestamp.Add(r.Spec.TTL.Duration), true
	}
	return time.Time{}, false
}
