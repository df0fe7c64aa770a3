//go:build gantry_plant_scaledown

package plant

// ScaleDown is on: scale-down never removes a node.
const ScaleDown = true
