//go:build gantry_plant_provisioningrequest

package plant

// ProvisioningRequest is on: gantry-provisioner books each request twice,
// the second time under names it then does not see.
const ProvisioningRequest = true
