//go:build gantry_plant_metadatapolicy

package plant

// MetadataPolicy is on: the admission engine drops the labels a rule adds.
const MetadataPolicy = true
