package provisioning

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/internal/plant"
)

// Reconciler serves the ProvisioningRequests of check-capacity and atomic
// scale-up classes.
// Every decision it takes is recorded on the request's status (conditions,
// status.provisioningClassDetails) or in Reservations, so a restarted or newly elected
// provisioner resumes where the last one stopped.
type Reconciler struct {
	Client    client.Client
	Simulator *simulator.Simulator
	Nodes     corelisters.NodeLister
	Pods      corelisters.PodLister
	// PodInformer is the informer behind Pods, with PodIndexers: which pods
	// came to a booking, and events that end a booking whose pods all came
	// (nil: only the Reservations' recorded owners count, and only their
	// changes wake a booked request).
	PodInformer cache.SharedIndexInformer
	// Provider is where atomic scale-ups add nodes and scale-down removes
	// them (nil: atomic classes can only book existing capacity).
	Provider nodegroups.Provider
	// APIReader reads around the cache, where scale-down must not act on a
	// stale view.
	APIReader client.Reader
	Recorder  record.EventRecorder
	Clock     clock.PassiveClock
	// Synced reports whether Nodes and Pods have synced; until then no
	// request is decided (nil: always).
	Synced func() bool
	// PlacementTimeout bounds how long a booking's Reservations may stay
	// unplaced (the scheduler found the room taken since the simulation)
	// before the attempt counts as failed and is retried.
	PlacementTimeout time.Duration
	// PriorityClasses resolve the priority of a booking's pods as the
	// Priority admission plugin would (nil: no PriorityClass exists).
	PriorityClasses schedulinglisters.PriorityClassLister
	// MaxPodsPerRequest bounds the pods of one request; a request asking
	// for more Fails with TooManyPods (0: DefaultMaxPodsPerRequest).
	MaxPodsPerRequest int
	// MaxBookingsPerNamespace bounds the live Reservations of the bookings
	// of one namespace's requests; a booking past it is not made (0:
	// DefaultMaxBookingsPerNamespace).
	MaxBookingsPerNamespace int
	// Workers is how many requests are reconciled at once (0:
	// DefaultWorkers).
	Workers int
	// ProcessorInstance, as cluster-autoscaler's
	// --check-capacity-processor-instance: when set, the provisioner serves
	// only the check-capacity requests whose processorInstance parameter
	// names it, and no atomic scale-up request; when empty, it leaves the
	// check-capacity requests that name an instance to that instance.
	ProcessorInstance string
	// NoUpstreamClasses: serve the ProvisioningClasses only, and leave the
	// upstream class names to a cluster-autoscaler running beside.
	NoUpstreamClasses bool
	// FinishedRequestTTL: a request that has ended (Failed, BookingExpired
	// or CapacityRevoked) is deleted this long after it ended (0: never).
	FinishedRequestTTL time.Duration
	// NodeGroupBackoff and MaxNodeGroupBackoff: a node group whose
	// scale-up failed (nodes not Ready within the provisioning timeout, or
	// the provider refused to add them) is left out of the plans of every
	// request for NodeGroupBackoff, doubled after each further failure in
	// a row up to MaxNodeGroupBackoff (0: DefaultNodeGroupBackoff,
	// DefaultMaxNodeGroupBackoff).
	NodeGroupBackoff, MaxNodeGroupBackoff time.Duration
	// SimulationBudget bounds the filter evaluations of one simulation of
	// a request (0: simulator.DefaultEvaluations); SimulationTimeout, its
	// time (0: DefaultSimulationTimeout). A request past either Fails with
	// SimulationBudgetExceeded.
	SimulationBudget  int64
	SimulationTimeout time.Duration

	// bookMu covers the commit of a booking (simulateAndCommit), not the
	// simulation.
	bookMu sync.Mutex
	// commits are the bookings committed, for the simulations that ran
	// beside them.
	commits commitLog
	// turns hands the simulator's instances to namespaces in turn.
	turns     *turns
	turnsOnce sync.Once
	// wake brings requests put back for their turn to the queue again.
	wake chan event.TypedGenericEvent[*provv1.ProvisioningRequest]
	// assumed are Reservations being created that the cache may not show yet.
	assumedMu sync.Mutex
	assumed   map[string]assumedReservation
	// templates are the PodTemplates read for the requests served.
	templates templateCache
	// assumedScaleUps are scale-ups planned, by request UID, whose attempt
	// the cache may not show yet: the namespace's quota counts them.
	assumedScaleUps map[types.UID]assumedScaleUp
	// active counts, per request, the Reservations holding capacity (for
	// gantry_provisioning_bookings_active).
	activeMu sync.Mutex
	active   map[types.UID]int
	// noRequestIndex: the Reservations in the cache have no IndexRequest.
	noRequestIndex bool
	// noPodGroupIndex: the requests in the cache have no IndexRequestPodGroup.
	noPodGroupIndex bool
	// backoff are the node groups backed off after failed scale-ups.
	backoff groupBackoff
	// kueue is the watch of Kueue's Workloads (kueue.go).
	kueue kueueWatch
}

// DefaultFinishedRequestTTL is the default of
// --delete-finished-requests-after: cluster-autoscaler deletes requests 7
// days after they were provisioned or failed.
const DefaultFinishedRequestTTL = 7 * 24 * time.Hour

// DefaultSimulationTimeout is the default of --simulation-timeout.
const DefaultSimulationTimeout = 30 * time.Second

// DefaultSimulationInstances is the default of --simulation-instances: how
// many simulations run at once, each for another namespace.
const DefaultSimulationInstances = 2

// DefaultWorkers is how many requests the controller reconciles at once
// unless Reconciler.Workers says otherwise. Only the simulation of a
// booking's commit is serialized (bookMu), and simulations run in turns
// (turns.go); a reconcile spends most of its time waiting for
// kube-apiserver (Reservations created, status written).
const DefaultWorkers = 16

// wakeBuffer is how many wake-ups of requests put back may wait for the
// controller; past it they are dropped, and the requests come back after
// putBackRetry.
const wakeBuffer = 1024

// wakeChannel carries the requests put back for their turn that a ticket
// given back wakes.
func (r *Reconciler) wakeChannel() <-chan event.TypedGenericEvent[*provv1.ProvisioningRequest] {
	r.theTurns()
	return r.wake
}

// theTurns are the turns of the simulator's instances, made at first use.
func (r *Reconciler) theTurns() *turns {
	r.turnsOnce.Do(func() {
		r.wake = make(chan event.TypedGenericEvent[*provv1.ProvisioningRequest], wakeBuffer)
		instances := 1
		if r.Simulator != nil {
			instances = r.Simulator.Instances()
		}
		r.turns = newTurns(instances, func(key types.NamespacedName) {
			pr := &provv1.ProvisioningRequest{}
			pr.Namespace, pr.Name = key.Namespace, key.Name
			select {
			case r.wake <- event.TypedGenericEvent[*provv1.ProvisioningRequest]{Object: pr}:
			default:
			}
		})
	})
	return r.turns
}

// SetupWithManager registers the controller: it watches requests, their
// bookings, classes, PodTemplates, evicted Kueue Workloads (once
// SetupWorkloadsWithManager has run) and, with PodInformer, the pods bound
// into bookings.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &schedv1alpha1.Reservation{}, IndexRequest, IndexReservationRequest); err != nil {
		// The cache started before (the controller waited for its CRDs):
		// orphans are then looked for in all the Reservations.
		mgr.GetLogger().V(1).Info("Reservations not indexed by request", "err", err)
		r.noRequestIndex = true
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &provv1.ProvisioningRequest{}, IndexRequestPodGroup, indexRequestPodGroup); err != nil {
		// The requests of a PodGroup's bound member are then looked for
		// in all the requests of its namespace.
		mgr.GetLogger().V(1).Info("Requests not indexed by PodGroup", "err", err)
		r.noPodGroupIndex = true
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("provisioningrequest").
		For(&provv1.ProvisioningRequest{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, DefaultWorkers)}).
		Watches(&schedv1alpha1.Reservation{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			ns, name, err := cache.SplitMetaNamespaceKey(o.GetAnnotations()[AnnotationRequest])
			if err != nil || ns == "" || name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
		})).
		Watches(&autoscalingv1alpha1.ProvisioningClass{}, handler.EnqueueRequestsFromMapFunc(r.requestsOfClass)).
		// Their metadata only: templates are read whole when served
		// (templates.go).
		WatchesMetadata(&v1.PodTemplate{}, handler.EnqueueRequestsFromMapFunc(r.requestsOfTemplate)).
		WatchesRawSource(source.Channel(r.kueue.channel(), &handler.TypedEnqueueRequestForObject[*provv1.ProvisioningRequest]{})).
		WatchesRawSource(source.Channel(r.wakeChannel(), &handler.TypedEnqueueRequestForObject[*provv1.ProvisioningRequest]{}))
	if r.PodInformer != nil {
		b = b.WatchesRawSource(&source.Informer{Informer: r.PodInformer, Handler: handler.EnqueueRequestsFromMapFunc(
			func(ctx context.Context, o client.Object) []reconcile.Request {
				if p, ok := o.(*v1.Pod); ok {
					return r.requestsOfBoundPod(ctx, p)
				}
				return nil
			})})
	}
	return b.Complete(r)
}

func (r *Reconciler) requestsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	var list provv1.ProvisioningRequestList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, pr := range list.Items {
		if pr.Spec.ProvisioningClassName == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pr)})
		}
	}
	return out
}

// requestsOfTemplate are the requests that a PodTemplate's event concerns:
// those of its namespace that name it in a pod set and have not ended.
// Kueue makes a PodTemplate for every request: waking every request of the
// namespace on each would cost a reconcile per live request per template.
func (r *Reconciler) requestsOfTemplate(ctx context.Context, o client.Object) []reconcile.Request {
	var list provv1.ProvisioningRequestList
	// Read only: the cache's own objects, not copies.
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		pr := &list.Items[i]
		if namesTemplate(pr, o.GetName()) && !newRequest(pr).isTerminal() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)})
		}
	}
	return out
}

func namesTemplate(pr *provv1.ProvisioningRequest, name string) bool {
	for _, ps := range pr.Spec.PodSets {
		if ps.PodTemplateRef.Name == name {
			return true
		}
	}
	return false
}

// resolveClass is the class serving pr, or false when the provisioner
// does not serve it (another controller may).
func (r *Reconciler) resolveClass(ctx context.Context, pr *provv1.ProvisioningRequest) (Class, bool, error) {
	c, ok := builtinClass(pr.Spec.ProvisioningClassName)
	if !ok || r.NoUpstreamClasses {
		var pc autoscalingv1alpha1.ProvisioningClass
		err := r.Client.Get(ctx, types.NamespacedName{Name: pr.Spec.ProvisioningClassName}, &pc)
		if apierrors.IsNotFound(err) {
			return Class{}, false, nil
		}
		if err != nil {
			return Class{}, false, err
		}
		c = classOf(&pc)
	}
	return c, r.servesInstance(pr, c), nil
}

// servesInstance applies ProcessorInstance to a request of class c.
func (r *Reconciler) servesInstance(pr *provv1.ProvisioningRequest, c Class) bool {
	if c.Handler != autoscalingv1alpha1.HandlerCheckCapacity {
		return r.ProcessorInstance == ""
	}
	return string(pr.Spec.Parameters[ParameterProcessorInstance]) == r.ProcessorInstance
}

// leaked is what the bug planted for the Leak family keeps (internal/plant).
var leaked [][]byte

// Reconcile moves one request along: accept it, check quota, simulate,
// book, confirm, and then watch the booking until it ends.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx).WithValues("provisioningRequest", req.NamespacedName)
	ctx = klog.NewContext(ctx, logger)
	if plant.Leak {
		leaked = append(leaked, make([]byte, 64<<10))
	}
	if r.Synced != nil && !r.Synced() {
		// An empty snapshot would find no capacity anywhere.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	var pr provv1.ProvisioningRequest
	if err := r.Client.Get(ctx, req.NamespacedName, &pr); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.collectOrphans(ctx, req.NamespacedName, "")
		}
		return reconcile.Result{}, err
	}
	// Bookings of an earlier request of the same name would be consumed by
	// this one's pods (they name the request, not its UID).
	if err := r.collectOrphans(ctx, req.NamespacedName, pr.UID); err != nil {
		return reconcile.Result{}, err
	}
	rq := newRequest(&pr)
	if !pr.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.release(ctx, rq, "the request is being deleted")
	}
	class, served, err := r.resolveClass(ctx, &pr)
	if err != nil || !served {
		return reconcile.Result{}, err
	}
	rq.class = class
	if rq.isTerminal() {
		if err := r.release(ctx, rq, ""); err != nil {
			return reconcile.Result{}, err
		}
		return r.deleteFinished(ctx, rq)
	}
	if !controllerutil.ContainsFinalizer(&pr, Finalizer) {
		controllerutil.AddFinalizer(&pr, Finalizer)
		if err := r.Client.Update(ctx, &pr); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.serve(ctx, rq)
}

// deleteFinished deletes a request FinishedRequestTTL after it ended, as
// cluster-autoscaler deletes requests 7 days after they were provisioned
// or failed; until then the request comes back when the time is up.
func (r *Reconciler) deleteFinished(ctx context.Context, rq *request) (reconcile.Result, error) {
	if r.FinishedRequestTTL <= 0 {
		return reconcile.Result{}, nil
	}
	pr := rq.pr
	if wait := rq.endedAt().Add(r.FinishedRequestTTL).Sub(r.Clock.Now()); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	// The UID precondition: never a new request of the same name.
	if err := r.Client.Delete(ctx, pr, client.Preconditions{UID: &pr.UID}); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("deleting the finished request: %w", err)
	}
	klog.FromContext(ctx).V(1).Info("Deleted a finished request", "endedAt", rq.endedAt(), "after", r.FinishedRequestTTL)
	return reconcile.Result{}, nil
}

// release deletes the request's Reservations and, once none is left,
// drops the finalizer of a deleted request. A deleted request's scale-up in
// flight is rolled back, and the nodes it had added that nothing uses are
// removed.
func (r *Reconciler) release(ctx context.Context, rq *request, why string) error {
	pr := rq.pr
	deleting := !pr.DeletionTimestamp.IsZero()
	// A failed attempt's booking (why says why) is released through the API
	// too: the next attempt creates Reservations of the same names, and
	// would take one left behind, pinned to the old placement, for its own.
	// A terminal request's (why "", on every reconcile) is released from
	// the cache.
	bookings, err := r.bookingsToRelease(ctx, pr, deleting || why != "")
	if err != nil {
		return err
	}
	if deleting && rq.scaleUpInFlight() {
		if err := r.rollBackAttempt(ctx, rq, why); err != nil {
			return err
		}
	}
	for i := range bookings {
		if err := r.Client.Delete(ctx, &bookings[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing booking %s: %w", bookings[i].Name, err)
		}
		r.unassume(bookings[i].Name)
	}
	r.trackBookings(pr.UID, 0)
	if len(bookings) > 0 && why != "" {
		r.Recorder.Eventf(pr, v1.EventTypeNormal, ReasonBookingReleased, "Released the room of %d booked pods: %s", summarizeBookings(bookings, recordedOwners).total, why)
	}
	if deleting {
		if err := r.removeUnusedNodes(ctx, rq); err != nil {
			return err
		}
	}
	if deleting && controllerutil.ContainsFinalizer(pr, Finalizer) {
		controllerutil.RemoveFinalizer(pr, Finalizer)
		return client.IgnoreNotFound(r.Client.Update(ctx, pr))
	}
	return nil
}

// bookingsToRelease are the request's Reservations: those the cache shows
// and those this process is creating or has created that it does not show
// yet. When final (the finalizer goes next, and with it the last chance to
// find them; or a retry reuses their names), they are listed through the
// API reader: a booking created a moment ago may not be in the cache yet.
func (r *Reconciler) bookingsToRelease(ctx context.Context, pr *provv1.ProvisioningRequest, final bool) ([]schedv1alpha1.Reservation, error) {
	reader := client.Reader(r.Client)
	if final && r.APIReader != nil {
		reader = r.APIReader
	}
	var list schedv1alpha1.ReservationList
	if err := reader.List(ctx, &list, client.MatchingLabels{LabelRequestUID: string(pr.UID)}); err != nil {
		return nil, err
	}
	return r.withAssumedOf(pr.UID, withoutTwins(list.Items)), nil
}

// IndexRequest indexes Reservations by the request they book for
// (AnnotationRequest, namespace/name).
const IndexRequest = "provisioningRequest"

// IndexReservationRequest is the IndexRequest value of a Reservation.
func IndexReservationRequest(o client.Object) []string {
	if key := o.GetAnnotations()[AnnotationRequest]; key != "" && o.GetLabels()[LabelRequestUID] != "" {
		return []string{key}
	}
	return nil
}

// collectOrphans deletes the Reservations that name the request key but
// belong to another request of that name (uid is the current one's, "" if
// there is none): one deleted while its booking was still being created,
// or whose finalizer was removed by hand. Their owners are the pods that
// name the request, so left alone they would hold room for, and be
// consumed by, a later request of the same name. A Reservation is deleted
// only once the API server, not the cache, says that its request is gone.
func (r *Reconciler) collectOrphans(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	var list schedv1alpha1.ReservationList
	opts := []client.ListOption{client.MatchingFields{IndexRequest: key.String()}}
	if r.noRequestIndex {
		opts = []client.ListOption{client.HasLabels{LabelRequestUID}, client.UnsafeDisableDeepCopy}
	}
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		return fmt.Errorf("listing the bookings of %s: %w", key, err)
	}
	var orphans []schedv1alpha1.Reservation
	for _, res := range list.Items {
		if res.Annotations[AnnotationRequest] != key.String() {
			continue
		}
		if owner := types.UID(res.Labels[LabelRequestUID]); owner != "" && owner != uid {
			orphans = append(orphans, *res.DeepCopy())
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var live provv1.ProvisioningRequest
	switch err := reader.Get(ctx, key, &live); {
	case apierrors.IsNotFound(err):
		live.UID = ""
	case err != nil:
		return err
	}
	var errs []error
	n := 0
	for i := range orphans {
		if orphans[i].Labels[LabelRequestUID] == string(live.UID) {
			// The cache is behind: this is the current request's.
			continue
		}
		if err := r.Client.Delete(ctx, &orphans[i]); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting orphaned booking %s: %w", orphans[i].Name, err))
			continue
		}
		r.unassume(orphans[i].Name)
		n++
	}
	if n > 0 {
		klog.FromContext(ctx).V(1).Info("Deleted the bookings of an earlier request of the same name", "reservations", n)
	}
	return errors.Join(errs...)
}

func (r *Reconciler) bookings(ctx context.Context, pr *provv1.ProvisioningRequest) ([]schedv1alpha1.Reservation, error) {
	var list schedv1alpha1.ReservationList
	if err := r.Client.List(ctx, &list, client.MatchingLabels{LabelRequestUID: string(pr.UID)}); err != nil {
		return nil, err
	}
	return withoutTwins(list.Items), nil
}

// writeStatus writes the request's status as its steps have set it, and
// records the events of the conditions it carries for the first time.
func (r *Reconciler) writeStatus(ctx context.Context, rq *request) error {
	err := r.Client.Status().Update(ctx, rq.pr)
	if apierrors.IsConflict(err) {
		return errRetry
	}
	if err != nil {
		return err
	}
	for _, e := range rq.onWritten {
		r.Recorder.Event(rq.pr, e.typ, e.reason, e.msg)
	}
	rq.onWritten = nil
	return nil
}

var errRetry = errors.New("the request changed meanwhile; retrying")

// writeMetadata writes the request's metadata (the annotations set, and
// whatever else changed there), keeping its status as the caller has set
// it so far.
func (r *Reconciler) writeMetadata(ctx context.Context, rq *request) error {
	status := rq.pr.Status.DeepCopy()
	if err := r.Client.Update(ctx, rq.pr); err != nil {
		if apierrors.IsConflict(err) {
			return errRetry
		}
		return err
	}
	rq.pr.Status = *status
	return nil
}
