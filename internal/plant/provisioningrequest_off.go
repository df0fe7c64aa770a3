//go:build !gantry_plant_provisioningrequest

package plant

// ProvisioningRequest is the switch of the bug planted for the ProvisioningRequest family (off in this
// build): gantry-provisioner's bookings record one pod more than they hold room for, so a request is served more than it asked.
const ProvisioningRequest = false
