// Package soak runs Gantry under mixed tenant work for a long time while
// faults are injected on a seeded schedule, and judges the cluster with
// test/soak/invariants throughout and at the end. Its files build with the
// soak tag only: the suite runs on demand (`make soak`, and `make
// soak-plants` on binaries with a planted bug), never in `make test`.
//
// Each tenant works in two namespaces, one of ProvisioningRequests under a
// ResourceQuota and one of Reservations and pods, each governed by a
// MetadataPolicy (every pod labelled, pods with soak.gantry.dev/forbidden
// rejected). Its operations, drawn from its seed: check-capacity and
// best-effort-atomic requests whose pods come once Provisioned; atomic
// requests of the general node group, which need a scale-up (and, at two
// pods of 2.5 CPU or more, exceed the quota and must be refused);
// Reservations with an owner; plain pods; pods the governing policy must
// reject; a preemptor pinned beside a victim of lower priority; a gated pod
// whose required affinity is narrowed before it is ungated; and creating,
// updating or deleting a second MetadataPolicy of its own.
//
// Faults, each kind in turn in an order shuffled every round: SIGKILL and
// restart of kube-apiserver, kube-scheduler, kube-controller-manager and
// gantry-provisioner, and one of the cluster's own nodes deleted and made
// again.
package soak
