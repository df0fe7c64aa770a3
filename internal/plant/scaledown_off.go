//go:build !gantry_plant_scaledown

package plant

// ScaleDown is the switch of the bug planted for the ScaleDown family (off
// in this build): scale-down never removes a node.
const ScaleDown = false
