// Package provisioning is gantry-provisioner's ProvisioningRequest
// controller: it serves requests (autoscaling.x-k8s.io/v1) of check-capacity
// and atomic scale-up classes. It simulates their pods with the cluster
// scheduler's filters, adds nodes through a node-group provider when an
// atomic class needs them, and books the room found with Reservations.
//
// # Files
//
// A request's way, whatever its class, is controller.go (Reconcile) →
// lifecycle.go (serve) → booking.go (simulateAndBook, placeAndBook,
// createAll), with snapshot.go for the simulation's cluster; every step
// takes the request value (request), whose recorded state request.go reads
// and writes in the vocabulary of conditions.go. The check-capacity class
// has no code of its own and never enters scaleup.go. An atomic scale-up
// request enters it where its pods do not fit the cluster as it is
// (planning and starting an attempt) and while its attempt is in flight
// (following it, rolling it back). cluster-autoscaler keeps a package per
// class (checkcapacity, besteffortatomic); here an atomic class is
// check-capacity plus a scale-up, so the shared way is one package and the
// scale-up one file.
//
//   - conditions.go: the request's vocabulary, in one place: every
//     condition and event reason, detail key, annotation, label, finalizer
//     and parameter name the provisioner defines (the condition types and
//     upstream's reasons are crds/provisioning/v1's).
//   - request.go: the request being served (request) and its recorded
//     state: conditions, failed attempts and the next one, the scale-up
//     attempt in flight (ownAttempt, scaleUpInFlight), details,
//     annotations. Its methods change the object in memory; the Reconciler
//     writes it.
//   - controller.go: the Reconciler, its watches and its entry point
//     (Reconcile), releasing a booking, the bookings of an earlier request
//     of the same name (collectOrphans), and the writes of a request's
//     status and metadata.
//   - lifecycle.go: a request's way through its states (serve): accepted,
//     quota checked, simulated and booked or scaled up, confirmed, then its
//     booking watched until it ends; notFound, attemptFailed and fail,
//     where an attempt or the request ends.
//   - snapshot.go: the cluster a simulation starts from, and the request's
//     pod sets as pods.
//   - booking.go: what a booking is, simulating in the namespace's turn
//     (with the quota check of package quota and the priorities of package
//     priority) and committing the booking under bookMu, creating it
//     after, confirming a booking, and the Reservations assumed until the
//     cache shows them.
//   - turns.go: the simulator's instances handed to namespaces in turn,
//     and the log of commits a simulation is checked against.
//   - rebook.go: a Provisioned request whose booked capacity went away
//     (node deleted, Reservation preempted) booked again elsewhere before
//     it is CapacityRevoked.
//   - scaleup.go: what only atomic scale-up classes do: planning,
//     starting and following a scale-up attempt, rolling it back, and
//     removing a deleted request's unused nodes.
//   - nodeuse.go: what keeps a node (a pod, a booking, a scale-up attempt
//     in flight), for simulations, rollbacks and package scaledown.
//   - class.go, metrics.go: classes and parameters, metrics.
//
// Sub-packages:
//
//   - quota: a request's pods checked against its namespace's
//     ResourceQuotas (QuotaExceeded).
//   - priority: a booking's priority, resolved from the pods'
//     PriorityClass as the Priority admission plugin resolves a pod's,
//     never the template's spec.priority (PriorityClassNotFound,
//     PriorityClassForbidden).
//   - scaledown: the scale-down loop, removing the nodes the provisioner
//     added once unneeded.
//   - gangs: requests made for the gang PodGroups the scheduler could not
//     place (--pod-group-requests-class), booked for the group's members
//     (ParameterPodGroup), and deleted once the group is placed.
//
// quota and priority import neither this package nor each other: they
// return typed errors, and this package names the reasons (conditions.go).
// scaledown imports this package and asks the Reconciler what keeps a
// node, and gangs imports it for the parameter's name; nothing here
// imports either.
//
// # Limits
//
// Requests are written by tenants, so what they cost is bounded before
// anything proportional to their size is allocated: a request's pods (the
// sum of its counts) by Reconciler.MaxPodsPerRequest (TooManyPods), its
// ValidUntilSeconds by MaxValidUntil or its class's validity
// (InvalidParameter). The quota check computes each pod set's usage once,
// multiplied by its count, counts the namespace's other bookings, and
// takes off the request's existing pods, each standing for at most one pod
// of a set (package quota); placeAndBook runs it before the simulation and
// again under bookMu at the commit. A simulation's work is bounded by
// --simulation-budget and --simulation-timeout. A lost booking is
// booked again at most maxRebooks times, and never larger than it was.
//
// # The provisioner's own state
//
// Tenants can edit a request's annotations but not its status, so what
// decides privileged actions (which nodes a rollback deletes, when the
// next attempt is due) is kept in status.provisioningClassDetails, the
// upstream CRD's map of class details: wire-compatible with upstream, with
// no further object to create, watch and garbage-collect, and written with
// the conditions in the same status update. Its keys (DetailScaleUpAttempt
// and the other Detail constants) are prefixed "gantry.dev/". An attempt's
// ID is always "<request UID>-<n>"; a recorded attempt that is not (ownAttempt)
// is ignored and logged. A rollback deletes only nodes labelled with the
// request's own attempt, and none that runs a pod or holds another
// request's booking (keepNode, through the API just before). The
// annotations earlier versions kept this state in
// (AnnotationScaleUpAttempt, AnnotationNextAttempt, ...) are ignored, not
// migrated: a request upgraded mid-attempt starts over, and its old
// attempt's nodes, once unused, are removed by scale-down or when the
// request is deleted. AnnotationAttempts still mirrors the count of failed
// attempts for people to read. These keys are all in conditions.go.
//
// # Glossary
//
//   - Room, or capacity: node resources and host ports free for a pod.
//   - Booking: the set of a request's Reservations (labelled
//     LabelRequestUID), one per node and pod set, each holding room for
//     some of the request's pods on one node.
//   - Booked pods: how many pods a Reservation holds room for
//     (AnnotationBookedPods, read by BookedPods).
//   - Consumed: a booked pod is consumed once one of the request's pods, an
//     owner of the Reservation by the consume annotation, was bound into
//     it, whether it still runs or has finished since (the Reservation's
//     status.currentOwners, and the pods bound into it: came.go). Comments
//     say such a pod has "come".
//   - Attempt: one try at finding capacity for a request, a simulation and
//     its booking, plus for atomic classes a scale-up whose ID
//     (DetailScaleUpAttempt) labels the nodes it adds. A failed attempt
//     is counted (DetailAttempts) and retried after a backoff until the
//     request's validity ends.
//   - In flight: a scale-up attempt whose nodes are not booked yet.
//   - Assumed: Reservations this process created that its cache does not
//     show yet; simulations count them, and a release deletes them.
//
// # Destructive actions read through the API
//
// The caches find candidates; what deletes is decided on a fresh read.
// Releasing a deleted request's booking lists its Reservations through the
// API reader (plus the assumed ones) before the finalizer goes; the
// bookings of an earlier request of the same name (its pods name the
// request, not its UID) are deleted once the API server says that request
// is gone (collectOrphans). A rollback or removal lists pods and
// Reservations through the API reader. Scale-down (package scaledown)
// taints, waits ScaleDown.TaintGrace, and lists pods (bound or nominated) and
// Reservations through the API reader before deleting a node; the time a
// node has been unneeded is kept on the node (scaledown's
// AnnotationUnneededSince), so leader changes do not restart it.
package provisioning
