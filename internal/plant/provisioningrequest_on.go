//go:build gantry_plant_provisioningrequest

package plant

// ProvisioningRequest is on: gantry-provisioner's bookings record one pod more than they hold room for, so a request is served more than it asked.
const ProvisioningRequest = true
