// Package asyncpreemption is Gantry's AsyncPreemption PostFilter plugin, a
// replacement for upstream's DefaultPreemption in Gantry's profiles.
//
// It chooses victims exactly as upstream does: it drives upstream's
// preemption.Evaluator (DryRunPreemption, SelectCandidate) with upstream's
// DefaultPreemption as the victim-selection Interface, so priorities, PDBs
// and preemptionPolicy behave identically. What differs is the API work,
// which runs off the scheduling cycle in an executor that:
//   - gates the preemptor (PreEnqueue) only while its work is in flight, and
//     re-activates it as soon as the work ends, whatever the result, even
//     when there was nothing left to delete: no preemptor waits for the
//     periodic flush of unschedulable pods;
//   - deletes victims with bounded concurrency through the scheduler's own
//     client (and so its rate limiter), never the same victim twice;
//   - on a failure stops, clears the nomination in memory and in
//     status.nominatedNodeName, and re-activates the preemptor after a
//     backoff counted from when the preemption began (as a pod's backoff
//     counts from its attempt), and not before its nomination is cleared;
//   - records metrics with the real result and duration of each run.
//
// Reservations are victims and preemptors too. The plugin knows their pods
// through reservation/reservepod and reads and clears the nominations of
// preempting reservations through frameworkext.ReservationNominator; it
// never imports the Reservation plugin. An owner pod's protection as a
// victim comes from the same nominator, when it also implements
// reservepod.Allocations: the live reservation's priority, never the pod's
// allocation annotation (without the plugin, every pod has its own).
package asyncpreemption
