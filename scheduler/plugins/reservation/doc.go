// Package reservation is Gantry's Reservation scheduler plugin: capacity
// held on a node for a set of owner pods.
//
// A pending Reservation is scheduled like a pod of its template: the plugin
// puts a reserve pod (no namespace, the reservation's UID) into the
// scheduling queue, every filter and score of the profile applies, and the
// plugin's Bind makes the reservation Available on the chosen node instead
// of creating a pod. An Available reservation stands in the scheduler's
// cache as a pod holding what its owners have not taken, so every plugin
// counts it as used. An owner pod gets, from the filter hook, a copy of the
// node without its reservation, scores higher there, and on Reserve claims
// it; its Bind binds the pod with the allocation in the Binding's annotations
// (scheduling.gantry.dev/reservation-allocated), set on the pod in the same
// write as its node, and that annotation on bound pods is where every
// scheduler instance rebuilds allocations from. The annotation is
// tenant-writable, so it is only a pointer: a pod counts against a
// reservation, and is protected at its priority as a preemption victim,
// only if the reservation is live, the pod is one of its owners, and it is
// bound to its node.
//
// A pending reservation preempts as a pod does, but only in profiles whose
// PostFilter runs reservepod.Preemptor (Gantry's AsyncPreemption); it is
// then nominated, in the store, to the node its victims leave. The plugin
// meets AsyncPreemption only through the contract package
// scheduler/reservepod, which neither owns: it provides its store there
// (reservepod.Provide) as the nominations AsyncPreemption reads and clears
// and as the check of owner pods' allocations, and it builds its reserve
// pods with reservepod's New and Cached.
//
// The status controller (leader only) writes phase, conditions, owners and
// allocation, expires reservations, fails those whose node is deleted, and
// deletes terminal ones after terminalReservationTTL.
//
// One store serves every profile of a scheduler, so every profile that runs
// the plugin must give it the same args (pluginConfig); a scheduler whose
// profiles differ refuses to start and names both profiles.
package reservation
