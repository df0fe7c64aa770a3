//go:build !gantry_plant_preemption

package plant

// Preemption is the switch of the bug planted for the Preemption family (off
// in this build): a preemptor whose preemption succeeded stays gated for an
// hour.
const Preemption = false
