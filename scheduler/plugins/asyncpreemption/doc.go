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
// Reservations are victims and preemptors too. The plugin meets the
// Reservation plugin only through the contract package scheduler/reservepod,
// which neither owns, and never imports it: it knows reserve pods with
// reservepod.Is and ranks victims with reservepod.VictimPriority, and it
// finds what the Reservation plugin provides to its scheduler with
// reservepod.ProviderOf, when it needs it (plugins are built in any order):
// the nominations of preempting reservations, which it reads and clears,
// and the check that gives an owner pod its live reservation's priority as
// a victim, never its allocation annotation's. Without the Reservation
// plugin there are no such nominations and every pod has its own priority.
// Its Name is reservepod.Preemptor, the PostFilter plugin through which the
// Reservation plugin lets pending reservations preempt.
package asyncpreemption
