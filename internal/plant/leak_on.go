//go:build gantry_plant_leak

package plant

// Leak is on: gantry-provisioner keeps 64 KiB for every reconcile of a
// request.
const Leak = true
