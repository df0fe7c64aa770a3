// Package soak runs Gantry under mixed tenant work for a long time while
// faults are injected on a seeded schedule, and judges the cluster with
// test/soak/invariants throughout and at the end. Its files build with the
// soak tag only: the suite runs on demand (`make soak`, and `make
// soak-plants` on binaries with a planted bug), never in `make test`.
//
// Each tenant works in three namespaces, each governed by a MetadataPolicy
// (every pod labelled, pods with soak.gantry.dev/forbidden rejected): one
// of ProvisioningRequests under a ResourceQuota, one of Reservations and
// pods, and one of Jobs queued in Kueue, whose ClusterQueue admits them
// through check-capacity requests. Its operations, drawn from its seed:
// check-capacity and best-effort-atomic requests whose pods come once
// Provisioned; atomic requests of the general node group, which need a
// scale-up; atomic requests of two pods that exceed the quota, which must
// be refused; Reservations with an owner; plain pods; pods the governing
// policy must reject; a preemptor pinned beside a victim of lower
// priority; a gated pod whose required affinity is narrowed before it is
// ungated; creating, updating or deleting a second MetadataPolicy of its
// own; and Jobs through Kueue, whose pods finish at once or within 15 s.
//
// Faults, each kind in turn in an order shuffled every round: SIGKILL and
// restart of kube-apiserver, kube-scheduler, kube-controller-manager,
// gantry-provisioner and Kueue's manager; one of the cluster's own nodes
// deleted and made again; and, for 15 s, one component's requests to
// kube-apiserver failed (one in three) and delayed (the others) at a fault
// proxy (test/faultproxy) that the run routes every component through.
//
// The run takes the shape of the suite's cluster. On the local runtime
// (Gantry's control plane, MetadataPolicy in-process) it is the above. On
// kind with the stock control plane (upstream's kube-apiserver,
// kube-scheduler and kube-controller-manager, with the managed overlay's
// gantry-scheduler, gantry-provisioner and gantry-webhook), it also kills
// gantry-scheduler's leader, one gantry-webhook replica, and both at once;
// the tenants write through a client that records every write admission
// refused for gantry-webhook's sake, which the checker's
// RefusedWhileWebhookReady judges against the replicas' readiness. Its
// fault proxy (cmd/faultproxy) runs on the control-plane node, passing
// each client's own credentials on, and gantry-scheduler,
// gantry-provisioner, gantry-webhook and Kueue's manager reach
// kube-apiserver through it.
package soak
