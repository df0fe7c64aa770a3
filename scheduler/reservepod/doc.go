// Package reservepod is the contract between Gantry's scheduler plugins
// that meet over reservations: Reservation, which schedules them, and
// AsyncPreemption, which preempts for them and preempts them. Neither
// plugin owns it and neither imports the other; both import it.
//
// It declares, in one place:
//   - the reserve pod, how a Reservation appears inside the scheduler: a pod
//     in its queue while pending (New) and in its cache while Available
//     (Cached); how a plugin tells such a pod from a real one (Is); and the
//     priority a pod has as a preemption victim (VictimPriority);
//   - what the Reservation plugin shares with the other plugins of its
//     scheduler (Provider): the nominations of preempting reservations,
//     which the scheduler's own nominator cannot hold (Nominator), and the
//     check of the owner pods placed in a reservation (Allocations). The
//     Reservation plugin Provides its store when it is built; a plugin that
//     needs it looks it up with ProviderOf, which is nil while no profile
//     of the scheduler runs the Reservation plugin;
//   - the PostFilter plugin through which the Reservation plugin lets
//     pending reservations preempt (Preemptor).
//
// It imports API types and frameworkext only: frameworkext.SharedKey
// carries the Provider within one scheduler, and frameworkext names no
// plugin.
package reservepod
