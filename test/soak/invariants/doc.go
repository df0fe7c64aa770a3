// Package invariants is the invariant checker of the soak test (issue
// 40): pure logic over snapshots of cluster objects, with no API calls.
// The soak run feeds a Checker a Snapshot from its informers every few
// seconds (Check) and each component's memory readings at the end
// (CheckLeaks); the checker keeps what it must across snapshots (when a
// request was first seen gone, when a node was last used, a request's
// attempts), reports each violation once while it persists (with when it
// began, when it was seen and how far past its limit), and counts the
// checks it made per family (Checks) for the run's report.
//
// Limits are in Config; DefaultConfig ties each to the value of Gantry's
// code it stands for. The checker takes the components' readings of a
// single object from them (reservation.AllocateOnce and Expiry,
// provisioning.HoldsNode, quota.Covers) and works out their accounting
// across objects on its own, so that it does not agree with them by
// construction: its doc comments name the function each rule follows.
//
// # Families
//
// Reservation (reservations.go). Lifetime, each within StatusResync+Grace
// (the status controller has no resync; issue 40's 30 s): a Pending or
// Available Reservation past spec.expires or creation+spec.ttl (Expired);
// an Available one whose node is gone (NodeGone); an allocate-once
// Available one with an owner placed in it, which the status controller
// makes Succeeded (NotSucceededWhenConsumed); a booking (labelled with its
// request's UID) whose ProvisioningRequest is gone, being deleted or ended,
// which the provisioner releases (OutlivesRequest); a Succeeded or Failed
// one past terminalReservationTTL (TerminalNotDeleted). A Reservation's
// owner pods may not exist yet by design (it holds capacity for pods to
// come), and nothing in the scheduler ends a Reservation whose owner pod
// is deleted before it is placed, so "outlives its owner" is judged as
// outliving its consumption (allocate-once) and its request (bookings).
// Capacity, each reported once it has held for Skew: per node and
// resource, the requests of the pods bound there that have not finished,
// plus what each live Reservation there holds (an Available one that is
// not consumed, less the requests of the pods placed in it, as the
// scheduler's store counts it) must not exceed allocatable
// (NodeOverbooked); a pod is allocated to one Reservation at most, by
// status.currentOwners and by placement (PodInTwoReservations); an
// allocate-once Reservation has one owner at most and status.allocated
// stays within what a Reservation holds (OverAllocated). A pod is placed in
// a Reservation when it is bound to its node with an allocation annotation
// naming it and one of its owners selects it, the scheduler's own rule.
//
// Quota (quota.go). Per ResourceQuota and resource of its hard (status.hard,
// else spec.hard), once it has held for Skew: what the namespace's pods
// use, by kube-apiserver's own pod evaluator (scopes, terminal and
// terminating pods, count/pods, extended resources), plus what the
// namespace's live bookings hold for pods that have not come, counted as
// the provisioner counts them against quota, stays within hard
// (QuotaExceeded). A pod that consumes a request and holds quota of its
// own (pending, or bound outside its booking) stands for one of the
// booking's pods, so a pod and its booked room count once. The
// provisioner checks quota when it books; kube-apiserver's quota
// admission does not know bookings, so a workload that creates pods
// consuming no request in a namespace with live bookings can break this
// invariant without any fault of Gantry's: the soak workload must not.
// Scale-ups in flight hold quota in the provisioner's check but are no
// booking, and are not counted.
//
// ProvisioningRequest (requests.go), for the requests of Config.Classes:
// Provisioned=True or ended (Failed, BookingExpired or CapacityRevoked
// True, or deleted) by creation + validity (ValidUntilSeconds, else the
// class's) + ValidityGrace (+ ClassGrace for atomic scale-up), judged
// from the conditions' transition times, so a late decision is caught even
// between snapshots (NotDecidedInValidity). Served once: its live
// Reservations book no more pods than it asks for (BookedTwice); no
// Reservation of a failed attempt outlives it into the next, judged from
// the request's count of failed attempts (AttemptsOverlap); no Reservation
// is created after it ended (BookedAfterEnd); it is not Provisioned again
// after it ended, nor stops being ended (RevivedAfterEnd). A Provisioned
// request ends once the latest expiry of its Reservations has passed
// (ProvisionedPastBooking).
//
// ScaleDown (nodes.go): a node a scale-up attempt added outlives its
// request (gone, being deleted or ended), unused since, by at most
// scale-down's unneeded time, taint grace and interval plus Grace
// (NodeOutlivesRequest). Nodes of groups kept at their minimum size are
// left out with Config.KeepNodeGroups.
//
// Preemption (preemption.go). A pod nominated to a node
// (status.nominatedNodeName), unbound, neither being deleted, gated nor
// finished, is bound or loses that nomination within PreemptionLimit of
// when the checker first saw it nominated there, or of when that node last
// had a terminating pod of lower priority (a victim stays until its
// kubelet has stopped it, and the preemptor waits, as upstream's does):
// AsyncPreemption's preemptionTimeout, its longest backoff after a failed
// preemption and its wait for the victims to leave the scheduler's cache,
// plus Grace (PreemptorStuck). From the scheduler's view
// of each node (Snapshot.SchedulerNodes; nothing of it is judged while it
// was not read), each for longer than Grace: its nominator holds no pod
// that is gone from the API, nor a Reservation that is gone or no longer
// Pending (NominationOfGonePod); its cache holds no pod that is gone, nor
// the reserve pod of a Reservation that is gone or neither Pending (the
// scheduler assumes it while it binds) nor Available (CachedPodGone). A
// Reservation appears in the view as its reserve pod: no namespace, its
// name and UID.
//
// MetadataPolicy (metadatapolicy.go), for MetadataPolicies. The checker
// remembers each policy's generations: the spec, and the first and last
// snapshot that showed it. A pod created at t (its creationTimestamp,
// whole seconds) is judged against a generation only if the checker saw
// it at t-PolicyLag or before, and again at t+1s+Skew or after, and no
// other generation of the policy meanwhile, so that it was in effect
// throughout the pod's admission; and only if it is Enforce, its targets
// include pods on CREATE and the pod is of its namespace. Its rules are
// read against the pod as submitted, which the checker takes to be the
// pod's labels and annotations less every key its namespace's policies
// write. That holds under what the soak workload keeps: no selector
// selects on a key a policy writes, no two policies write one key with
// different values, and no pod's labels or annotations change after its
// creation. Then no pod exists that a rejecting rule selects
// (RejectNotEnforced); if none rejects, each label and annotation a
// selecting rule sets is on the pod with that value, the first writer
// winning in the engine's order (PolicyNotApplied), and so is the
// schedulerName one sets (SchedulerNotChosen). A pod whose policy changed
// around its creation is not judged against that policy at all, rather
// than against the wrong generation. With a webhook's replicas named
// (Config.WebhookSelector, webhook.go), every write admission refused
// because of the webhook itself (Snapshot.Refusals: it could not be
// called, or its policies were not loaded) is judged once a snapshot Skew
// later shows the replicas: none may be refused while a replica had been
// Ready for WebhookFailover and no replica's container had ended in the
// WebhookFailover before (RefusedWhileWebhookReady).
//
// Leak (leak.go): per component, the median heap after GC and goroutine
// count of the run's last LeakWindow are at most HeapRatio and
// GoroutineRatio of their medians over the LeakWindow after LeakWarmUp
// (HeapGrowth, GoroutineGrowth).
//
// # Left out
//
// ClusterMetadataPolicies are not judged: they select namespaces by labels
// a snapshot does not hold. AsyncPreemption's backoff is its in-memory state, which
// PreemptorStuck bounds from outside rather than reads. Pending
// Reservations that preempted are nominated in the Reservation plugin's
// store, which the scheduler's view does not list (only the scheduling
// queue's nominations), so NominationOfGonePod judges the Reservations
// nominated there only once the view lists them.
//
// # Snapshots
//
// Each list of a Snapshot is every object of its kind; the lists may come
// from informers at moments apart, which Skew allows for in the states that
// must never hold. Timed invariants compare the API's timestamps (creation,
// deletion, condition transitions, which are whole seconds) with the
// snapshot's time, so the checker must run on a clock in step with the
// control plane's.
package invariants
