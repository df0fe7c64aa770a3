//go:build !gantry_plant_quota

package plant

// Quota is the switch of the bug planted for the Quota family (off in this
// build): gantry-provisioner books without checking the namespace's
// ResourceQuotas.
const Quota = false
