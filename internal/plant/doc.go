// Package plant holds the switches of the bugs planted to show that the
// soak test's invariant checker catches what it claims
// (hack/soak-plants.sh, which builds with GANTRY_BUILD_TAGS). Each invariant family has a build tag,
// gantry_plant_<family> (Families lists them); a binary built with it has
// that family's bug, one the family's invariants must name. Without the tag
// the switch is the constant false and the compiler drops the planted
// code: no release build sets one (hack/images.sh refuses extra tags), and
// TestNoBugPlanted fails on a build that has one.
package plant

// Families are the families with a planted bug, by the suffix of their
// build tag, each with the invariant family of test/soak/invariants that
// must name it.
var Families = map[string]string{
	"reservation":         "Reservation",
	"quota":               "Quota",
	"provisioningrequest": "ProvisioningRequest",
	"scaledown":           "ScaleDown",
	"preemption":          "Preemption",
	"metadatapolicy":      "MetadataPolicy",
	"leak":                "Leak",
}

// switches are the switches by family.
var switches = map[string]bool{
	"reservation": Reservation, "quota": Quota, "provisioningrequest": ProvisioningRequest, "scaledown": ScaleDown,
	"preemption": Preemption, "metadatapolicy": MetadataPolicy, "leak": Leak,
}

// Planted says which switches this build has on, in no order.
func Planted() []string {
	var out []string
	for name, on := range switches {
		if on {
			out = append(out, name)
		}
	}
	return out
}
