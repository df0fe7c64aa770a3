//go:build gantry_plant_quota

package plant

// Quota is on: gantry-provisioner books without checking the namespace's
// ResourceQuotas.
const Quota = true
