//go:build gantry_plant_provisioningrequest

package plant

// ProvisioningRequest is on: gantry-provisioner's bookings record one pod
// more than they hold room for, and confirming a booking accepts more pods
// than the request asked for.
const ProvisioningRequest = true
