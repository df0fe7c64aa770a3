// Package cluster brings Gantry's development and e2e cluster up and down.
//
// A cluster is made by a Runtime (local processes through kwokctl, or kind)
// and then prepared by the same ordered list of small actions whatever the
// runtime: wait for the control plane, create kwok nodes with a topology,
// install Gantry's CRDs, wait for the nodes to be Ready. Up is idempotent: it
// converges an existing cluster to the requested shape instead of failing.
// When creation fails the cluster is removed (unless Retain is set) after its
// logs were exported and the tail of the failing component's log was shown.
package cluster
