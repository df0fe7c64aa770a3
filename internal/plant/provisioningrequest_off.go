//go:build !gantry_plant_provisioningrequest

package plant

// ProvisioningRequest is the switch of the bug planted for the
// ProvisioningRequest family (off in this build): gantry-provisioner books
// each request twice, the second time under names it then does not see.
const ProvisioningRequest = false
