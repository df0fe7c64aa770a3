//go:build !gantry_plant_metadatapolicy

package plant

// MetadataPolicy is the switch of the bug planted for the MetadataPolicy
// family (off in this build): the admission engine drops the labels a rule
// adds.
const MetadataPolicy = false
