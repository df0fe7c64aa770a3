//go:build gantry_plant_preemption

package plant

// Preemption is on: a preemptor whose preemption succeeded stays gated for
// an hour.
const Preemption = true
