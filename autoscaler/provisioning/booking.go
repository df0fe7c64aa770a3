package provisioning

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gantry-dev/gantry/autoscaler/provisioning/priority"
	"github.com/gantry-dev/gantry/autoscaler/provisioning/quota"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/internal/plant"
)

// A booking is the capacity a Provisioned request holds for its pods: one
// Reservation per node and pod set, pinned to the node the simulation
// chose, holding the requests of the set's pods placed there, owned by the
// pods that consume the request (either consume annotation) and the
// members of the PodGroup it names (ParameterPodGroup), living for
// the class's booking duration. A Reservation for one pod is consumed once;
// one for several is shared by its owners until they have all come.
// Pods with host ports get one Reservation each (ports do not add up). Reservations are
// cluster-scoped and cannot be owned by a namespaced request: the request's
// UID label ties them to it, and the request's finalizer removes them.
// Its labels and annotations (LabelRequestUID, AnnotationRequest,
// AnnotationBookedPods) are in conditions.go.

// BookedPods is how many pods a Reservation of a booking holds room for.
func BookedPods(res *schedv1alpha1.Reservation) int {
	n, err := strconv.Atoi(res.Annotations[AnnotationBookedPods])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// bookingName is the deterministic name of Reservation i of pod set s: an
// attempt resumed after a restart creates nothing twice.
func bookingName(uid types.UID, set, i int) string {
	return fmt.Sprintf("provreq-%s-%d-%d", uid, set, i)
}

// bookingFor is the Reservation that books node for count pods like pod,
// at pod's spec.priority: placeAndBook has set it as admission would
// (priority.Resolve), whatever the template said.
func bookingFor(r *provv1.ProvisioningRequest, set, i int, pod *v1.Pod, node string, count int, c Class) *schedv1alpha1.Reservation {
	ports := hostPorts(pod)
	owners := make([]schedv1alpha1.ReservationOwner, 0, 3)
	for _, key := range []string{provv1.AnnotationConsume, provv1.AnnotationConsumeLegacy} {
		owners = append(owners, schedv1alpha1.ReservationOwner{
			Annotation: &schedv1alpha1.OwnerAnnotation{Key: key, Value: r.Name}, Namespace: r.Namespace})
	}
	if g := RequestPodGroup(r); g != "" {
		owners = append(owners, schedv1alpha1.ReservationOwner{PodGroup: g, Namespace: r.Namespace})
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for name, q := range requests {
		q.Mul(int64(count))
		requests[name] = q
	}
	schedulerName := pod.Spec.SchedulerName
	if schedulerName == "" {
		schedulerName = v1.DefaultSchedulerName
	}
	return &schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:        bookingName(r.UID, set, i),
			Labels:      map[string]string{LabelRequestUID: string(r.UID)},
			Annotations: map[string]string{AnnotationRequest: r.Namespace + "/" + r.Name, AnnotationBookedPods: strconv.Itoa(count)},
		},
		Spec: schedv1alpha1.ReservationSpec{
			Template: schedv1alpha1.ReservationTemplate{
				Requests:      requests,
				NodeName:      node,
				Tolerations:   pod.Spec.Tolerations,
				HostPorts:     ports,
				Priority:      pod.Spec.Priority,
				SchedulerName: schedulerName,
				// The simulation found the room free: a booking takes
				// nothing from running pods.
				PreemptionPolicy: ptr.To(v1.PreemptNever),
			},
			Owners:       owners,
			TTL:          &metav1.Duration{Duration: c.BookingDuration},
			AllocateOnce: ptr.To(count == 1),
		},
	}
}

// bookingState sums up a request's Reservations, in pods.
type bookingState struct {
	total, available, consumed int
	// pending are not placed yet; unschedulable is the scheduler's reason
	// for one that it could not place.
	pending       int
	unschedulable string
	// failed counts the pods whose room ended before they came, by the
	// Reservation's reason (Expired, NodeDeleted, Preempted, ...).
	failed map[string]int
	nodes  map[string]bool
	// reservations is how many Reservations there are.
	reservations int
}

// BookingPods sums a booking's Reservations up in pods: how many they
// book, and how many of those the request's pods have consumed.
// A pod counts as come when the Reservation records it as an owner.
func BookingPods(rs []schedv1alpha1.Reservation) (booked, consumed int) {
	s := summarizeBookings(rs, recordedOwners)
	return s.total, s.consumed
}

// recordedOwners is how many of res's booked pods its status records as
// come (see cameTo for what it misses).
func recordedOwners(res *schedv1alpha1.Reservation) int {
	return min(len(res.Status.CurrentOwners), BookedPods(res))
}

// summarizeBookings sums a booking up; cameTo says how many of a
// Reservation's booked pods have come.
func summarizeBookings(rs []schedv1alpha1.Reservation, cameTo func(*schedv1alpha1.Reservation) int) bookingState {
	s := bookingState{reservations: len(rs), failed: map[string]int{}, nodes: map[string]bool{}}
	for i := range rs {
		r := &rs[i]
		pods := BookedPods(r)
		came := cameTo(r)
		s.total += pods
		if r.Status.NodeName != "" {
			s.nodes[r.Status.NodeName] = true
		}
		switch r.Status.Phase {
		case schedv1alpha1.ReservationAvailable:
			s.consumed += came
			s.available += pods - came
		case schedv1alpha1.ReservationSucceeded:
			s.consumed += pods
		case schedv1alpha1.ReservationFailed:
			s.consumed += came
			if pods == came {
				// A shared booking all its pods used, ended by its TTL.
				continue
			}
			reason := "Failed"
			if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionReady); c != nil && c.Reason != "" {
				reason = c.Reason
			}
			s.failed[reason] += pods - came
		default:
			s.pending += pods
			if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionScheduled); c != nil &&
				c.Status == metav1.ConditionFalse && c.Reason == schedv1alpha1.ReasonUnschedulable {
				s.unschedulable = c.Message
			}
		}
	}
	return s
}

// hostPorts are the host ports pod asks for.
func hostPorts(pod *v1.Pod) []v1.ContainerPort {
	var ports []v1.ContainerPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				ports = append(ports, p)
			}
		}
	}
	return ports
}

// simulateAndBook places the request's pods on the cluster and books the
// placement. When they do not fit, a check-capacity request has found no
// capacity, an atomic one starts a scale-up, and one whose scale-up nodes
// are all Ready has lost them (the attempt is rolled back).
func (r *Reconciler) simulateAndBook(ctx context.Context, rq *request) (reconcile.Result, error) {
	sim, err := r.placeAndBook(ctx, rq)
	if errors.Is(err, errPutBack) {
		// Woken when a request of its namespace is decided (turns.go).
		return reconcile.Result{RequeueAfter: putBackRetry}, nil
	}
	if errors.Is(err, errRoomTaken) {
		return reconcile.Result{RequeueAfter: readinessPoll}, nil
	}
	if be := (*simulator.BudgetExceeded)(nil); errors.As(err, &be) {
		return r.fail(ctx, rq, ReasonSimulationBudgetExceeded, r.budgetMessage(be))
	}
	if rej, ok := priority.AsRejection(err); ok {
		return r.fail(ctx, rq, priorityReason(rej), err.Error())
	}
	if qe := (*quota.ExceededError)(nil); errors.As(err, &qe) {
		return r.fail(ctx, rq, ReasonQuotaExceeded, qe.Error())
	}
	if ar := (*admissionRefusal)(nil); errors.As(err, &ar) {
		return r.fail(ctx, rq, ReasonPodsNotAdmitted, ar.Error())
	}
	if le := (*bookingLimitError)(nil); errors.As(err, &le) {
		if le.adding > le.limit {
			return r.fail(ctx, rq, ReasonTooManyBookings, le.Error())
		}
		// The namespace's other bookings end in time: tried again.
		if rq.scaleUpInFlight() {
			return r.attemptFailed(ctx, rq, le.Error())
		}
		return r.notFound(ctx, rq, le.Error())
	}
	if inv := (*simulator.InvalidPodSet)(nil); errors.As(err, &inv) {
		// A pod set's resource claims name a template or claim that does
		// not exist, or too many: no pod like it could be scheduled.
		return r.fail(ctx, rq, ReasonUnsupportedPods, inv.Error())
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if u := sim.unschedulable; u != nil {
		// Atomic classes go on in scaleup.go.
		switch {
		case rq.scaleUpInFlight():
			return r.attemptFailed(ctx, rq, "the attempt's nodes are Ready but the pods no longer fit: "+u.Error())
		case sim.scaleUp != nil:
			res, err := r.startScaleUp(ctx, rq, u, sim.scaleUp)
			if !rq.scaleUpInFlight() {
				r.unassumeScaleUp(rq.pr.UID) // it did not start
			}
			return res, err
		}
		return r.notFound(ctx, rq, u.Error())
	}
	klog.FromContext(ctx).V(2).Info("Booking", "pods", countPods(rq.sets), "nodes", sim.nodes)
	// Nothing is written yet: the booking's Reservations record the
	// attempt, and their events bring the request back to confirm it
	// (confirmBooking). Most are placed at once, and the status is written
	// once, Provisioned, with its event; one still not placed after
	// bookingReportAfter is reported as being booked (condition and event).
	return reconcile.Result{RequeueAfter: r.PlacementTimeout}, nil
}

// putBackRetry is when a request put back for its namespace's turn is
// tried again if no ticket given back wakes it first.
const putBackRetry = 5 * time.Second

// budgetMessage says that a simulation passed its budget, and which flags
// set it.
func (r *Reconciler) budgetMessage(be *simulator.BudgetExceeded) string {
	if be.Late {
		return fmt.Sprintf("%v; the simulation of one attempt may take %s (--simulation-timeout)", be, cmp.Or(r.SimulationTimeout, DefaultSimulationTimeout))
	}
	return be.Error() + " (--simulation-budget)"
}

// bookingReportAfter is how long a booking may be placed before the
// request's status says it is being booked (Provisioned=False, reason
// BookingCapacity).
const bookingReportAfter = 2 * time.Second

func bookingMessage(pods, nodes int) string {
	return fmt.Sprintf("capacity found for %d pods on %d nodes; booking it", pods, nodes)
}

// simulation is what placeAndBook came to: either a booking created on
// nodes, or pods that do not fit the cluster as it is (unschedulable),
// with, for an atomic class, the scale-up planned for them.
type simulation struct {
	// placement is where the pods fit; nodes is how many nodes the
	// booking is on.
	placement     simulator.Placement
	nodes         int
	unschedulable *simulator.Unschedulable
	// scaleUp is set for an atomic class whose pods do not fit and whose
	// request has no scale-up in flight.
	scaleUp *scaleUpPlanning
}

// placeAndBook simulates the request's pods on the cluster and creates
// their booking; when they do not fit and the class is atomic, it plans the
// scale-up on the same snapshot. Simulations run in turns, without bookMu;
// two requests must not book the same room: the booking is committed under
// bookMu (simulateAndCommit), assumed there (counted by every later
// simulation, see assume), and its Reservations are created after it lets
// go. Everything else, creating nodes included, runs after it returns, on
// several workers.
func (r *Reconciler) placeAndBook(ctx context.Context, rq *request) (simulation, error) {
	// The ticket comes first: a request put back costs no API call until
	// its namespace's turn is near.
	tk, err := r.theTurns().enter(client.ObjectKeyFromObject(rq.pr))
	if err != nil {
		return simulation{}, err
	}
	defer tk.done()
	// A priority class that does not exist, or that the namespace may not
	// use, fails the request with its own reason before admission refuses
	// the pods in its words.
	if err := r.resolvePriorities(ctx, rq); err != nil {
		return simulation{}, err
	}
	if err := r.admitPodSets(ctx, rq.pr, rq.sets); err != nil {
		return simulation{}, err
	}
	if err := bookable(rq.sets); err != nil {
		return simulation{}, err
	}
	sim, todo, err := r.placeAndAssume(ctx, rq, tk)
	// The next request of the namespace may go while these are created.
	tk.done()
	if err != nil || len(todo) == 0 {
		return sim, err
	}
	return sim, r.createAssumed(ctx, todo)
}

// bookable refuses pod sets whose pods, as admission made them (a
// LimitRange may give them requests), request no resource: a Reservation
// holds resources, and one holding none is refused by its API.
func bookable(sets []simulator.PodSet) error {
	for _, s := range sets {
		if len(quotav1.RemoveZeros(resourcehelper.PodRequests(s.Pod, resourcehelper.PodResourcesOptions{}))) == 0 {
			return &simulator.InvalidPodSet{PodSet: s.Name, Reason: "its pods request no resources, and a booking holds room in resources only: give their containers requests"}
		}
	}
	return nil
}

// resolvePriorities sets the priority of the request's pods: the one
// admission would give them, not the template's (package priority), or a
// Kueue workload's WorkloadPriorityClass's (kueue.go).
func (r *Reconciler) resolvePriorities(ctx context.Context, rq *request) error {
	if err := priority.Resolve(ctx, r.PriorityClasses, r.Client, rq.pr.Namespace, rq.sets); err != nil {
		return err
	}
	if prio, ok := r.workloadPriority(ctx, rq.pr); ok {
		for _, s := range rq.sets {
			s.Pod.Spec.Priority = &prio
		}
	}
	return nil
}

// placeAndAssume is placeAndBook's simulation and commit: the booking it
// found room for is assumed, not created.
func (r *Reconciler) placeAndAssume(ctx context.Context, rq *request, tk *ticket) (simulation, []*schedv1alpha1.Reservation, error) {
	if err := r.resolvePriorities(ctx, rq); err != nil {
		return simulation{}, nil, err
	}
	pr, class := rq.pr, rq.class
	return r.simulateAndCommit(ctx, rq, tk, trial{
		sets: rq.sets,
		// A new attempt, a retry, and the booking made once a scale-up's
		// nodes are Ready (its PodTemplate is read again then, and may
		// ask for more than it did) are all checked against the quota.
		except:      pr.UID,
		planScaleUp: !rq.scaleUpInFlight() && class.Handler == autoscalingv1alpha1.HandlerAtomicScaleUp,
		book: func(p simulator.Placement) []*schedv1alpha1.Reservation {
			return bookingsFor(pr, class, rq.sets, nil, p, func(set, i int) string { return bookingName(pr.UID, set, i) })
		},
	})
}

// trial is what one attempt simulates and books.
type trial struct {
	sets []simulator.PodSet
	// except is the request whose bookings the quota check leaves out (its
	// own, booked again; empty: none).
	except types.UID
	// planScaleUp: when the pods do not fit, plan a scale-up for them.
	planScaleUp bool
	// book is the booking of a placement.
	book func(simulator.Placement) []*schedv1alpha1.Reservation
}

// maxSimulations bounds how many times one attempt is simulated because
// bookings committed meanwhile may have taken the room it found; after
// that, the request is tried again (errRoomTaken).
const maxSimulations = 3

// errRoomTaken: bookings committed while the attempt was simulated, every
// time it was, may have taken the room it found.
var errRoomTaken = errors.New("bookings made while the request was simulated took the room it found")

// simulateAndCommit simulates the trial on the cluster in the turns of the
// request's ticket tk, without bookMu, and commits what it found under bookMu:
// the quota and the booking limit are checked again against the bookings
// made so far, and a booking another one committed since the snapshot may
// have taken the room of (commitLog) is simulated again. A request over its
// namespace's quota is refused before it is simulated.
func (r *Reconciler) simulateAndCommit(ctx context.Context, rq *request, tk *ticket, tr trial) (simulation, []*schedv1alpha1.Reservation, error) {
	for i := 1; ; i++ {
		booked, err := r.bookedNow(ctx)
		if err != nil {
			return simulation{}, nil, err
		}
		if err := r.checkNamespaceQuota(ctx, rq.pr, tr.sets, tr.except, booked); err != nil {
			return simulation{}, nil, err
		}
		sim, gen, err := r.simulate(ctx, rq, tk, tr)
		if err != nil {
			return simulation{}, nil, err
		}
		todo, err := r.commit(ctx, rq, tr, &sim, gen)
		if errors.Is(err, errRoomTaken) && i < maxSimulations {
			simulationsRepeated.Inc()
			continue
		}
		return sim, todo, err
	}
}

// simulate runs the trial's simulation in the ticket's turn, on a snapshot
// of the cluster at the commit log's generation it returns. Pods that do
// not fit get their scale-up planned on the same snapshot, within the same
// budget.
func (r *Reconciler) simulate(ctx context.Context, rq *request, tk *ticket, tr trial) (simulation, uint64, error) {
	if err := tk.wait(ctx); err != nil {
		return simulation{}, 0, err
	}
	defer tk.yield()
	r.bookMu.Lock()
	gen := r.commits.gen
	cluster, err := r.cluster(ctx, rq.pr)
	r.bookMu.Unlock()
	if err != nil {
		return simulation{}, gen, err
	}
	b := r.newBudget()
	start := time.Now()
	defer func() {
		simulationEvaluations.Observe(float64(b.Used()))
		simulationDuration.Observe(time.Since(start).Seconds())
	}()
	placement, err := r.Simulator.PlaceWithin(ctx, cluster, tr.sets, b)
	var unschedulable *simulator.Unschedulable
	var over *simulator.BudgetExceeded
	switch {
	case errors.As(err, &unschedulable):
		sim := simulation{unschedulable: unschedulable}
		if tr.planScaleUp {
			sim.scaleUp = r.planScaleUpFor(ctx, rq, cluster, b)
			if errors.As(sim.scaleUp.err, &over) {
				return simulation{}, gen, over
			}
		}
		return sim, gen, nil
	case errors.As(err, &over):
		return simulation{}, gen, over
	case err != nil:
		return simulation{}, gen, fmt.Errorf("simulating: %w", err)
	}
	return simulation{placement: placement}, gen, nil
}

// newBudget is the work budget of one simulation.
func (r *Reconciler) newBudget() *simulator.Budget {
	b := &simulator.Budget{Evaluations: r.SimulationBudget}
	if b.Evaluations == 0 {
		b.Evaluations = simulator.DefaultEvaluations
	}
	b.Deadline = time.Now().Add(cmp.Or(r.SimulationTimeout, DefaultSimulationTimeout))
	return b
}

// commit assumes the booking of sim's placement, or the scale-up it
// planned, under bookMu, after checking the quota and the booking limit
// against the bookings made so far; errRoomTaken when a booking committed
// since the snapshot of generation gen may have taken its room.
func (r *Reconciler) commit(ctx context.Context, rq *request, tr trial, sim *simulation, gen uint64) ([]*schedv1alpha1.Reservation, error) {
	pr := rq.pr
	var todo []*schedv1alpha1.Reservation
	if sim.placement != nil {
		todo = tr.book(sim.placement)
	}
	planned := sim.scaleUp != nil && sim.scaleUp.noGroups == nil && sim.scaleUp.err == nil && sim.scaleUp.plan.total() > 0
	if sim.placement == nil && !planned {
		return nil, nil // nothing to book
	}
	nodes := sets.New[string]()
	for _, res := range todo {
		nodes.Insert(res.Spec.Template.NodeName)
	}
	shape := shapeOf(tr.sets)
	r.bookMu.Lock()
	defer r.bookMu.Unlock()
	if r.commits.taken(gen, nodes, shape) {
		return nil, errRoomTaken
	}
	booked, err := r.bookedNow(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.checkNamespaceQuota(ctx, pr, tr.sets, tr.except, booked); err != nil {
		return nil, err
	}
	if planned {
		// The next request's quota check counts it before the cache
		// shows its attempt.
		r.assumeScaleUp(pr, quota.Demands(tr.sets))
		return nil, nil
	}
	if err := r.checkBookingLimit(booked, pr.Namespace, len(todo)); err != nil {
		return nil, err
	}
	// The next request's simulation must count these before the cache
	// shows them, or it would book the same room.
	r.assume(todo)
	r.commits.add(nodes, shape)
	sim.nodes = len(nodes)
	return todo, nil
}

// shapeOf is what placements of sets depend on beyond their nodes.
func shapeOf(sets []simulator.PodSet) placementShape {
	var s placementShape
	for _, set := range sets {
		s.crossNode = s.crossNode || simulator.CrossNode(set.Pod)
		s.claims = s.claims || len(set.Pod.Spec.ResourceClaims) > 0
	}
	return s
}

// bookingsFor is the booking of placement: per pod set, one Reservation
// per node for the set's pods there, in the order the simulation used the
// nodes, or one per pod for pods with host ports (ports do not add up).
// index maps sets to the request's pod set indexes (nil: the same); name
// names Reservation k of a pod set.
func bookingsFor(pr *provv1.ProvisioningRequest, class Class, sets []simulator.PodSet, index []int, placement simulator.Placement, name func(set, k int) string) []*schedv1alpha1.Reservation {
	var todo []*schedv1alpha1.Reservation
	for i, s := range sets {
		si := i
		if index != nil {
			si = index[i]
		}
		add := func(k int, node string, count int) {
			res := bookingFor(pr, si, k, s.Pod, node, count, class)
			res.Name = name(si, k)
			todo = append(todo, res)
		}
		if len(hostPorts(s.Pod)) > 0 {
			for k, node := range placement[s.Name] {
				add(k, node, 1)
			}
			continue
		}
		var order []string
		count := map[string]int{}
		for _, node := range placement[s.Name] {
			if count[node] == 0 {
				order = append(order, node)
			}
			count[node]++
		}
		for k, node := range order {
			add(k, node, count[node])
		}
	}
	return todo
}

// bookingLimitError: adding more Reservations to namespace's live ones
// would pass limit.
type bookingLimitError struct {
	namespace           string
	live, adding, limit int
}

func (e *bookingLimitError) Error() string {
	if e.adding > e.limit {
		return fmt.Sprintf("the booking needs %d Reservations, more than the %d a namespace's requests may hold at once (--max-bookings-per-namespace)", e.adding, e.limit)
	}
	return fmt.Sprintf("the booking needs %d Reservations and namespace %s's requests hold %d, of the %d they may hold at once (--max-bookings-per-namespace)", e.adding, e.namespace, e.live, e.limit)
}

// bookedNow are every Reservation, cached or assumed: what the booking
// checks made under bookMu count. Read only: the cache's own objects.
func (r *Reconciler) bookedNow(ctx context.Context) ([]schedv1alpha1.Reservation, error) {
	var rs schedv1alpha1.ReservationList
	if err := r.Client.List(ctx, &rs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return r.withAssumed(rs.Items), nil
}

// checkBookingLimit checks that adding Reservations of a booking keeps
// namespace's live ones among booked (bookedNow; not ended) within
// maxBookingsPerNamespace. The caller holds bookMu.
func (r *Reconciler) checkBookingLimit(booked []schedv1alpha1.Reservation, namespace string, adding int) error {
	live := 0
	for _, res := range booked {
		ns, _, ok := strings.Cut(res.Annotations[AnnotationRequest], "/")
		if !ok || ns != namespace {
			continue
		}
		switch res.Status.Phase {
		case "", schedv1alpha1.ReservationPending, schedv1alpha1.ReservationAvailable:
			live++
		}
	}
	if limit := r.maxBookingsPerNamespace(); live+adding > limit {
		return &bookingLimitError{namespace: namespace, live: live, adding: adding, limit: limit}
	}
	return nil
}

// checkNamespaceQuota checks the pods of sets, booked for request pr,
// against its namespace's ResourceQuotas (package quota), counting the
// room that the namespace's requests hold: the bookings of every request
// but the one of except (a request's own bookings are counted when what is
// checked is a part of them booked again; except is then empty), whose
// pods have not taken them yet, and the pods planned by the scale-ups in
// flight that are not booked yet. A booking or a scale-up holds capacity
// for the namespace as its pods would. The caller holds bookMu, so the
// bookings of a request checked just before are counted (assumed if the
// cache does not show them yet) and two requests cannot both pass on the
// same room. booked are the Reservations, cached or assumed (bookedNow).
func (r *Reconciler) checkNamespaceQuota(ctx context.Context, pr *provv1.ProvisioningRequest, sets []simulator.PodSet, except types.UID, booked []schedv1alpha1.Reservation) error {
	if plant.Quota {
		return nil
	}
	var quotas v1.ResourceQuotaList
	if err := r.Client.List(ctx, &quotas, client.InNamespace(pr.Namespace)); err != nil {
		return err
	}
	if len(quotas.Items) == 0 {
		return nil
	}
	qs := make([]*v1.ResourceQuota, len(quotas.Items))
	for i := range quotas.Items {
		qs[i] = &quotas.Items[i]
	}
	want := quota.Demands(sets)
	var pods int64
	for _, d := range want {
		pods += int64(d.Count)
	}
	existing, err := quota.ExistingConsumers(ctx, r.Pods, r.APIReader, pr, RequestPodGroup(pr), pods)
	if err != nil {
		return err
	}
	held := r.heldBookings(booked, pr.Namespace, except)
	planned, err := r.scaleUpsHeld(ctx, pr.Namespace, pr.UID, booked)
	if err != nil {
		return err
	}
	return quota.CheckRequest(qs, want, existing, append(held, planned...))
}

// scaleUpsHeld are the pods planned by the scale-ups in flight of
// namespace's requests but the one of uid that have no booking yet (one
// that has is counted by heldBookings): a scale-up holds the room its
// booking will take once its nodes are Ready. A scale-up the cache shows
// is counted with its PodTemplates as they are now (the booking is checked
// again when it is made, with them as they are then); one planned a moment
// ago that the cache does not show yet, as it was planned.
func (r *Reconciler) scaleUpsHeld(ctx context.Context, namespace string, uid types.UID, reservations []schedv1alpha1.Reservation) ([]quota.Demand, error) {
	var list provv1.ProvisioningRequestList
	// Read only: the cache's own objects, not copies.
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	booked := map[types.UID]bool{}
	for i := range reservations {
		if ns, _, ok := strings.Cut(reservations[i].Annotations[AnnotationRequest], "/"); ok && ns == namespace {
			booked[types.UID(reservations[i].Labels[LabelRequestUID])] = true
		}
	}
	var out []quota.Demand
	cached := map[types.UID]bool{}
	for i := range list.Items {
		other := newRequest(&list.Items[i])
		if !other.scaleUpInFlight() {
			continue
		}
		cached[other.pr.UID] = true
		if other.pr.UID == uid || booked[other.pr.UID] {
			continue
		}
		sets, missing, err := r.podSets(ctx, other.pr)
		if err != nil {
			return nil, err
		}
		if missing != "" {
			continue // its attempt fails at its next reconcile: it books nothing
		}
		out = append(out, quota.Demands(sets)...)
	}
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	now := r.Clock.Now()
	for id, a := range r.assumedScaleUps {
		switch {
		case cached[id] || now.Sub(a.at) > assumeFor:
			delete(r.assumedScaleUps, id)
		case a.namespace == namespace && id != uid && !booked[id]:
			out = append(out, a.demands...)
		}
	}
	return out, nil
}

// assumedScaleUp is a scale-up planned for a request of namespace, for
// pods of demands, at at.
type assumedScaleUp struct {
	namespace string
	demands   []quota.Demand
	at        time.Time
}

// assumeScaleUp records the scale-up just planned for pr, for the quota
// checks that run before the cache shows its attempt (scaleUpsHeld).
func (r *Reconciler) assumeScaleUp(pr *provv1.ProvisioningRequest, demands []quota.Demand) {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	if r.assumedScaleUps == nil {
		r.assumedScaleUps = map[types.UID]assumedScaleUp{}
	}
	now := r.Clock.Now()
	// Those the cache shows by now go when a quota check runs; in a
	// cluster without quotas, here.
	for id, a := range r.assumedScaleUps {
		if now.Sub(a.at) > assumeFor {
			delete(r.assumedScaleUps, id)
		}
	}
	r.assumedScaleUps[pr.UID] = assumedScaleUp{namespace: pr.Namespace, demands: demands, at: now}
}

// unassumeScaleUp forgets the scale-up planned for the request of uid: it
// did not start, or its attempt ended.
func (r *Reconciler) unassumeScaleUp(uid types.UID) {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	delete(r.assumedScaleUps, uid)
}

// heldBookings are the pods that the bookings of namespace's requests but
// the one of uid hold room for and that have not come yet, one demand per
// Reservation. Reservations are cluster-scoped and written by the
// provisioner only, so their request annotation and requests are not the
// tenant's to change. A pod that came counts no more, recorded as an owner
// or not (cameTo): a running one is in the quota's used already, a
// finished one holds nothing.
func (r *Reconciler) heldBookings(rs []schedv1alpha1.Reservation, namespace string, uid types.UID) []quota.Demand {
	var out []quota.Demand
	for i := range rs {
		res := &rs[i]
		ns, _, ok := strings.Cut(res.Annotations[AnnotationRequest], "/")
		if !ok || ns != namespace || res.Labels[LabelRequestUID] == string(uid) {
			continue
		}
		booked := BookedPods(res)
		pods := booked
		requests := res.Spec.Template.Requests
		switch res.Status.Phase {
		case schedv1alpha1.ReservationAvailable:
			pods -= r.cameTo(res)
			requests = quotav1.SubtractWithNonNegativeResult(requests, res.Status.Allocated)
			// Pods that came unrecorded are not in status.allocated.
			requests = capToShare(requests, res.Spec.Template.Requests, pods, booked)
		case "", schedv1alpha1.ReservationPending:
		default:
			continue // ended: it holds nothing
		}
		if pods <= 0 {
			continue
		}
		out = append(out, quota.Held(namespace, res.Name, requests, pods))
	}
	return out
}

// capToShare caps each quantity of held at what n of total identical
// pods request, when all of them together request all. The share is worked
// out in big integers: a large node's memory in milli-units times a count
// of pods passes int64.
func capToShare(held, all v1.ResourceList, n, total int) v1.ResourceList {
	out := make(v1.ResourceList, len(held))
	for name, q := range held {
		a := all[name]
		milli := new(big.Int).Mul(big.NewInt(a.MilliValue()), big.NewInt(int64(max(n, 0))))
		milli.Quo(milli, big.NewInt(int64(total)))
		if milli.IsInt64() {
			if share := resource.NewMilliQuantity(milli.Int64(), a.Format); share.Cmp(q) < 0 {
				q = *share
			}
		}
		out[name] = q
	}
	return quotav1.RemoveZeros(out)
}

// createAssumed creates a booking that the caller assumed under bookMu,
// after it let go of it. A Reservation the API server refused is forgotten:
// it holds nothing, and the request's next reconcile finds its booking
// short (confirmBooking: interrupted, released and retried).
func (r *Reconciler) createAssumed(ctx context.Context, rs []*schedv1alpha1.Reservation) error {
	refused, err := r.createAll(ctx, rs)
	r.unassume(refused...)
	return err
}

// createConcurrency bounds the Reservation creates in flight for a booking.
const createConcurrency = 8

// createAll creates the booking's Reservations, several at a time; one
// that exists already (an attempt resumed) is fine. It returns the names
// of those the API server refused outright (not those a timeout leaves in
// doubt, nor those never tried after the first error).
func (r *Reconciler) createAll(ctx context.Context, rs []*schedv1alpha1.Reservation) ([]string, error) {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(createConcurrency)
	var (
		mu      sync.Mutex
		refused []string
	)
	for _, b := range rs {
		g.Go(func() error {
			err := r.Client.Create(ctx, b)
			if err == nil && plant.ProvisioningRequest {
				r.createTwin(ctx, b)
			}
			if err == nil || apierrors.IsAlreadyExists(err) {
				return nil
			}
			if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
				mu.Lock()
				refused = append(refused, b.Name)
				mu.Unlock()
			}
			return fmt.Errorf("booking %s: %w", b.Name, err)
		})
	}
	err := g.Wait()
	return refused, err
}

// confirmBooking looks at the Reservations of the current attempt: all
// placed → Provisioned; any lost or left unplaced past PlacementTimeout →
// the attempt failed (the room was taken since the simulation): released
// and retried.
func (r *Reconciler) confirmBooking(ctx context.Context, rq *request, bookings []schedv1alpha1.Reservation) (reconcile.Result, error) {
	pr, class := rq.pr, rq.class
	st := summarizeBookings(bookings, r.cameTo)
	r.trackBookings(pr.UID, st.available+st.pending)
	want := countPods(rq.sets)
	if st.available+st.consumed == want && len(st.failed) == 0 {
		until := oldest(bookings).Add(class.BookingDuration)
		reason, how := provv1.ReasonCapacityIsFound, "found"
		if attempt, _ := rq.ownAttempt(); attempt != "" {
			reason, how = provv1.ReasonCapacityIsProvisioned, "provisioned by scale-up attempt "+attempt+" and"
		}
		msg := fmt.Sprintf("capacity for %d pods %s booked on %d nodes until %s", want, how, len(st.nodes), until.UTC().Format(time.RFC3339))
		rq.setCondition(provv1.ConditionProvisioned, metav1.ConditionTrue, reason, msg)
		if err := r.writeStatus(ctx, rq); err != nil {
			return reconcile.Result{}, err
		}
		r.Recorder.Event(pr, v1.EventTypeNormal, reason, msg)
		observeResult(class, resultProvisioned)
		timeToProvisioned.WithLabelValues(class.Name).Observe(r.Clock.Since(pr.CreationTimestamp.Time).Seconds())
		return reconcile.Result{}, nil
	}
	waited := r.Clock.Since(oldest(bookings))
	if len(st.failed) == 0 && st.total < want && st.total+r.assumedNotCached(pr.UID, bookings) >= want {
		// This process created the rest a moment ago; the cache shows
		// them soon (their events wake the request).
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if len(st.failed) == 0 && st.total == want && waited < r.PlacementTimeout {
		next := r.PlacementTimeout - waited
		if waited < bookingReportAfter {
			next = min(next, bookingReportAfter-waited)
		} else if msg := bookingMessage(want, bookedNodes(bookings)); rq.setCondition(provv1.ConditionProvisioned, metav1.ConditionFalse, ReasonBooking, msg) {
			rq.onWritten = append(rq.onWritten, requestEvent{v1.EventTypeNormal, ReasonBooking, msg})
			if err := r.writeStatus(ctx, rq); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{RequeueAfter: next}, nil
	}
	why := fmt.Sprintf("%d of %d booked pods were not placed within %s", st.pending, want, r.PlacementTimeout)
	if st.unschedulable != "" {
		why += ": " + st.unschedulable
	}
	switch {
	case len(st.failed) > 0:
		why = fmt.Sprintf("booking lost before it was confirmed (%v)", st.failed)
	case st.total < want:
		// The provisioner stopped while creating them: the placement they
		// followed may be stale now.
		why = fmt.Sprintf("booking interrupted with room for %d of %d pods created", st.total, want)
	default:
		// The simulation and the scheduler disagreed about the room.
		bookedPodsNotPlaced.WithLabelValues(class.Name).Add(float64(st.pending))
	}
	if err := r.release(ctx, rq, why); err != nil {
		return reconcile.Result{}, err
	}
	return r.attemptFailed(ctx, rq, why)
}

// bookedNodes is how many nodes a booking's Reservations are for.
func bookedNodes(rs []schedv1alpha1.Reservation) int {
	nodes := map[string]bool{}
	for i := range rs {
		nodes[cmp.Or(rs[i].Status.NodeName, rs[i].Spec.Template.NodeName)] = true
	}
	return len(nodes)
}

func oldest(rs []schedv1alpha1.Reservation) time.Time {
	t := rs[0].CreationTimestamp.Time
	for _, r := range rs[1:] {
		if r.CreationTimestamp.Time.Before(t) {
			t = r.CreationTimestamp.Time
		}
	}
	return t
}

// assumeFor is how long a booking just made stands in the simulation
// before the cache shows it; after that the cache is the truth.
const assumeFor = time.Minute

// assume records Reservations being created, for the simulations that run
// before the cache shows them. It keeps copies: the create writes the API
// server's answer into the object it sends, while other workers' simulations
// read what was assumed.
func (r *Reconciler) assume(rs []*schedv1alpha1.Reservation) {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	if r.assumed == nil {
		r.assumed = map[string]assumedReservation{}
	}
	now := r.Clock.Now()
	for _, res := range rs {
		r.assumed[res.Name] = assumedReservation{res: res.DeepCopy(), at: now}
	}
}

type assumedReservation struct {
	res *schedv1alpha1.Reservation
	at  time.Time
}

// unassume forgets Reservations deleted before the cache showed them.
func (r *Reconciler) unassume(names ...string) {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	for _, n := range names {
		delete(r.assumed, n)
	}
}

// assumedNotCached counts the pods booked by the request's Reservations
// this process created that cached does not show yet.
func (r *Reconciler) assumedNotCached(uid types.UID, cached []schedv1alpha1.Reservation) int {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	seen := make(map[string]bool, len(cached))
	for i := range cached {
		seen[cached[i].Name] = true
	}
	now := r.Clock.Now()
	n := 0
	for name, a := range r.assumed {
		if !seen[name] && a.res.Labels[LabelRequestUID] == string(uid) && now.Sub(a.at) <= assumeFor {
			n += BookedPods(a.res)
		}
	}
	return n
}

// withAssumedOf returns listed plus the Reservations of the request of uid
// that this process has created or is creating and listed does not show
// (of any age: deleting one that is gone costs a NotFound).
func (r *Reconciler) withAssumedOf(uid types.UID, listed []schedv1alpha1.Reservation) []schedv1alpha1.Reservation {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	seen := make(map[string]bool, len(listed))
	for i := range listed {
		seen[listed[i].Name] = true
	}
	out := listed
	for name, a := range r.assumed {
		if !seen[name] && a.res.Labels[LabelRequestUID] == string(uid) {
			out = append(out, *a.res)
		}
	}
	return out
}

// withAssumed returns cached plus the assumed Reservations the cache does
// not show yet, and forgets those it shows or that are too old.
func (r *Reconciler) withAssumed(cached []schedv1alpha1.Reservation) []schedv1alpha1.Reservation {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	if len(r.assumed) == 0 {
		return cached
	}
	seen := make(map[string]bool, len(cached))
	for i := range cached {
		seen[cached[i].Name] = true
	}
	now := r.Clock.Now()
	out := append([]schedv1alpha1.Reservation(nil), cached...)
	for name, a := range r.assumed {
		if seen[name] || now.Sub(a.at) > assumeFor {
			delete(r.assumed, name)
			continue
		}
		out = append(out, *a.res)
	}
	return out
}
