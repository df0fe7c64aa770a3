// Package upgrade is the upgrade in place (`make upgrade-test
// FROM=<revision>`): a kind cluster that an earlier Gantry release made
// (that release's gantry-cluster, node image and images, built from its
// commit) is given live Reservations, bookings, ProvisioningRequests in
// every state, MetadataPolicies and gated pods, then upgraded to this
// checkout's release with `gantry-cluster upgrade`, one step at a time in
// docs/upgrade.md's order, its kubelets left at the earlier release. After
// each step every object of the earlier release is read back unchanged,
// per kind, and throughout the soak's invariant checker judges the
// cluster (nothing double-booked, no booking outliving its request); the
// earlier release's add-ons are made to work against the new
// kube-apiserver mid-upgrade, and every part of the new release at the end.
//
// It runs on demand, never in CI: it builds an earlier release's node
// image. Build tag upgrade keeps it out of `make e2e`.
package upgrade
