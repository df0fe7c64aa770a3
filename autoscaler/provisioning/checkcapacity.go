package provisioning

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// serve moves a request of a served class along: accept it, check quota,
// simulate, scale up (atomic classes), book, confirm, and then watch the
// booking until it ends.
func (r *Reconciler) serve(ctx context.Context, pr *provv1.ProvisioningRequest, class Class) (reconcile.Result, error) {
	now := r.Clock.Now()
	params, err := parameters(pr, class)
	if err != nil {
		return r.fail(ctx, pr, class, ReasonInvalidParameter, err.Error())
	}
	deadline := pr.CreationTimestamp.Add(params.ValidUntil)
	if meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned) {
		return r.watchBooking(ctx, pr, class)
	}

	sets, missing, err := r.podSets(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	if missing != "" {
		if now.After(deadline) {
			return r.fail(ctx, pr, class, ReasonPodTemplateNotFound,
				fmt.Sprintf("PodTemplate %s/%s did not appear within the request's validity (%s)", pr.Namespace, missing, params.ValidUntil))
		}
		msg := fmt.Sprintf("PodTemplate %s/%s not found; waiting for it until %s", pr.Namespace, missing, deadline.UTC().Format(time.RFC3339))
		if setCondition(pr, provv1.ConditionAccepted, metav1.ConditionFalse, ReasonPodTemplateNotFound, msg) {
			r.Recorder.Event(pr, v1.EventTypeWarning, ReasonPodTemplateNotFound, msg)
			if err := r.writeStatus(ctx, pr); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{RequeueAfter: min(class.BackoffInitial, deadline.Sub(now)+time.Second)}, nil
	}
	for _, s := range sets {
		if len(s.Pod.Spec.ResourceClaims) > 0 {
			return r.fail(ctx, pr, class, ReasonUnsupportedPods,
				fmt.Sprintf("pod set %s uses resource claims, which the provisioner does not simulate", s.Name))
		}
	}
	if setCondition(pr, provv1.ConditionAccepted, metav1.ConditionTrue, ReasonAccepted,
		fmt.Sprintf("served by gantry-provisioner: class %s, handler %s", class.Name, class.Handler)) {
		r.Recorder.Eventf(pr, v1.EventTypeNormal, ReasonAccepted, "Checking capacity for %d pods (class %s)", countPods(sets), class.Name)
		if err := r.writeStatus(ctx, pr); err != nil {
			return reconcile.Result{}, err
		}
	}

	// An attempt in progress: its booking is being placed by the scheduler.
	bookings, err := r.bookings(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(bookings) > 0 {
		return r.confirmBooking(ctx, pr, class, params, deadline, sets, bookings)
	}
	if scaleUpInFlight(pr) {
		return r.followScaleUp(ctx, pr, class, params, deadline, sets)
	}

	// A new attempt only once the backoff of the last failed one is over
	// (the validity window's end is decided then too).
	if wait := nextAttempt(pr).Sub(now); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}

	var quotas v1.ResourceQuotaList
	if err := r.Client.List(ctx, &quotas, client.InNamespace(pr.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	if len(quotas.Items) > 0 {
		qs := make([]*v1.ResourceQuota, len(quotas.Items))
		for i := range quotas.Items {
			qs[i] = &quotas.Items[i]
		}
		if err := checkQuota(qs, expand(sets)); err != nil {
			return r.fail(ctx, pr, class, ReasonQuotaExceeded, err.Error())
		}
	}
	return r.simulateAndBook(ctx, pr, class, params, deadline, sets)
}

// simulateAndBook places the request's pods on the cluster and books the
// placement. When they do not fit, a check-capacity request has found no
// capacity, an atomic one starts a scale-up, and one whose scale-up nodes
// are all Ready has lost them (the attempt is rolled back).
func (r *Reconciler) simulateAndBook(ctx context.Context, pr *provv1.ProvisioningRequest, class Class, params Parameters,
	deadline time.Time, sets []simulator.PodSet) (reconcile.Result, error) {
	// From snapshot to a booking the cache shows, one request at a time:
	// two requests must not book the same room. Everything else runs on
	// several workers.
	r.bookMu.Lock()
	unlock := sync.OnceFunc(r.bookMu.Unlock)
	defer unlock()
	cluster, err := r.cluster(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	placement, err := r.Simulator.Place(ctx, cluster, sets)
	var unschedulable *simulator.Unschedulable
	if errors.As(err, &unschedulable) {
		switch {
		case scaleUpInFlight(pr):
			unlock()
			return r.abortScaleUp(ctx, pr, class, params, deadline,
				"the attempt's nodes are Ready but the pods no longer fit: "+unschedulable.Error())
		case class.Handler == autoscalingv1alpha1.HandlerAtomicScaleUp:
			return r.startScaleUp(ctx, pr, class, params, deadline, cluster, sets, unschedulable, unlock)
		}
		unlock()
		return r.notFound(ctx, pr, class, params, deadline, unschedulable.Error())
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("simulating: %w", err)
	}
	nodes := map[string]bool{}
	var todo []*schedv1alpha1.Reservation
	for si, s := range sets {
		if len(hostPorts(s.Pod)) > 0 {
			for i, node := range placement[s.Name] {
				nodes[node] = true
				todo = append(todo, bookingFor(pr, si, i, s.Pod, node, 1, class))
			}
			continue
		}
		// One Reservation per node for the set's pods there, in the order
		// the simulation used the nodes.
		var order []string
		count := map[string]int{}
		for _, node := range placement[s.Name] {
			if count[node] == 0 {
				order = append(order, node)
			}
			count[node]++
			nodes[node] = true
		}
		for i, node := range order {
			todo = append(todo, bookingFor(pr, si, i, s.Pod, node, count[node], class))
		}
	}
	// The next request's simulation must count these before the cache
	// shows them, or it would book the same room.
	r.assume(todo)
	if err := r.createAll(ctx, todo); err != nil {
		return reconcile.Result{}, err
	}
	unlock()
	msg := fmt.Sprintf("capacity found for %d pods on %d nodes; booking it", countPods(sets), len(nodes))
	klog.FromContext(ctx).V(2).Info("Booking", "pods", countPods(sets), "nodes", len(nodes))
	r.Recorder.Event(pr, v1.EventTypeNormal, ReasonBooking, msg)
	setCondition(pr, provv1.ConditionProvisioned, metav1.ConditionFalse, ReasonBooking, msg)
	if err := r.writeStatus(ctx, pr); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: r.PlacementTimeout}, nil
}

// createConcurrency bounds the Reservation creates in flight for a booking.
const createConcurrency = 8

// createAll creates the booking's Reservations, several at a time; one
// that exists already (an attempt resumed) is fine.
func (r *Reconciler) createAll(ctx context.Context, rs []*schedv1alpha1.Reservation) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(createConcurrency)
	for _, b := range rs {
		g.Go(func() error {
			if err := r.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("booking %s: %w", b.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// confirmBooking looks at the Reservations of the current attempt: all
// placed → Provisioned; any lost or left unplaced past PlacementTimeout →
// the attempt failed (the room was taken since the simulation): released
// and retried.
func (r *Reconciler) confirmBooking(ctx context.Context, pr *provv1.ProvisioningRequest, class Class, params Parameters,
	deadline time.Time, sets []simulator.PodSet, bookings []schedv1alpha1.Reservation) (reconcile.Result, error) {
	st := summarizeBookings(bookings)
	r.trackBookings(pr.UID, st.available+st.pending)
	want := countPods(sets)
	if st.available+st.consumed == want && len(st.failed) == 0 {
		until := oldest(bookings).Add(class.BookingDuration)
		reason, how := provv1.ReasonCapacityIsFound, "found"
		if attempt := pr.Annotations[AnnotationScaleUpAttempt]; attempt != "" {
			reason, how = provv1.ReasonCapacityIsProvisioned, "provisioned by scale-up attempt "+attempt+" and"
		}
		msg := fmt.Sprintf("capacity for %d pods %s booked on %d nodes until %s", want, how, len(st.nodes), until.UTC().Format(time.RFC3339))
		setCondition(pr, provv1.ConditionProvisioned, metav1.ConditionTrue, reason, msg)
		if err := r.writeStatus(ctx, pr); err != nil {
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
		return reconcile.Result{RequeueAfter: r.PlacementTimeout - waited}, nil
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
	}
	if err := r.release(ctx, pr, why); err != nil {
		return reconcile.Result{}, err
	}
	return r.abortScaleUp(ctx, pr, class, params, deadline, why)
}

// notFound records an attempt that found no capacity: Failed with
// noRetry or after the validity window, else retried after a backoff.
func (r *Reconciler) notFound(ctx context.Context, pr *provv1.ProvisioningRequest, class Class, params Parameters, deadline time.Time, why string) (reconcile.Result, error) {
	now := r.Clock.Now()
	if params.NoRetry {
		return r.fail(ctx, pr, class, provv1.ReasonCapacityIsNotFound, why)
	}
	if !now.Before(deadline) {
		return r.fail(ctx, pr, class, ReasonValidityExpired,
			fmt.Sprintf("no capacity within the request's validity (%s): %s", params.ValidUntil, why))
	}
	retry, err := r.recordFailedAttempt(ctx, pr, class, deadline)
	if err != nil {
		return reconcile.Result{}, err
	}
	msg := fmt.Sprintf("%s; attempt %d, retrying in %s", why, attempts(pr), retry.Round(time.Second))
	if setCondition(pr, provv1.ConditionProvisioned, metav1.ConditionFalse, provv1.ReasonCapacityIsNotFound, msg) {
		r.Recorder.Event(pr, v1.EventTypeNormal, provv1.ReasonCapacityIsNotFound, msg)
	}
	if err := r.writeStatus(ctx, pr); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: retry}, nil
}

// fail makes the request Failed, for good, and releases its booking.
func (r *Reconciler) fail(ctx context.Context, pr *provv1.ProvisioningRequest, class Class, reason, msg string) (reconcile.Result, error) {
	if scaleUpInFlight(pr) {
		// A failed request leaves no partial scale-up behind.
		if err := r.rollBackAttempt(ctx, pr, msg); err != nil {
			return reconcile.Result{}, err
		}
	}
	setCondition(pr, provv1.ConditionFailed, metav1.ConditionTrue, reason, msg)
	if meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionProvisioned) == nil {
		setCondition(pr, provv1.ConditionProvisioned, metav1.ConditionFalse, reason, msg)
	}
	if err := r.writeStatus(ctx, pr); err != nil {
		return reconcile.Result{}, err
	}
	r.Recorder.Event(pr, v1.EventTypeWarning, reason, msg)
	observeResult(class, resultFailed)
	return reconcile.Result{}, r.release(ctx, pr, "the request failed")
}

// watchBooking follows a Provisioned request's booking: it ends when its
// pods consume it, when it expires (BookingExpired) or when booked capacity
// goes away (CapacityRevoked).
func (r *Reconciler) watchBooking(ctx context.Context, pr *provv1.ProvisioningRequest, class Class) (reconcile.Result, error) {
	bookings, err := r.bookings(ctx, pr)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := summarizeBookings(bookings)
	r.trackBookings(pr.UID, st.available+st.pending)
	typ, reason, msg := "", "", ""
	switch {
	case st.failed[schedv1alpha1.ReasonNodeDeleted]+st.failed[schedv1alpha1.ReasonPreempted] > 0:
		typ, reason = provv1.ConditionCapacityRevoked, ReasonCapacityRevoked
		msg = fmt.Sprintf("booked capacity went away before the request's pods used it: %d reservations lost their node, %d were preempted",
			st.failed[schedv1alpha1.ReasonNodeDeleted], st.failed[schedv1alpha1.ReasonPreempted])
	case st.failed[schedv1alpha1.ReasonExpired] > 0:
		typ, reason = provv1.ConditionBookingExpired, ReasonBookingExpired
		msg = fmt.Sprintf("the booking expired after %s with %d of %d booked pods not started", class.BookingDuration, st.total-st.consumed, st.total)
	default:
		return reconcile.Result{}, nil
	}
	setCondition(pr, typ, metav1.ConditionTrue, reason, msg)
	if err := r.writeStatus(ctx, pr); err != nil {
		return reconcile.Result{}, err
	}
	r.Recorder.Event(pr, v1.EventTypeWarning, reason, msg)
	return reconcile.Result{}, r.release(ctx, pr, msg)
}

// podSets are the request's pod sets as pods; missing names a PodTemplate
// that does not exist.
func (r *Reconciler) podSets(ctx context.Context, pr *provv1.ProvisioningRequest) ([]simulator.PodSet, string, error) {
	out := make([]simulator.PodSet, 0, len(pr.Spec.PodSets))
	for i, ps := range pr.Spec.PodSets {
		var t v1.PodTemplate
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: pr.Namespace, Name: ps.PodTemplateRef.Name}, &t)
		if apierrors.IsNotFound(err) {
			return nil, ps.PodTemplateRef.Name, nil
		}
		if err != nil {
			return nil, "", err
		}
		pod := &v1.Pod{ObjectMeta: *t.Template.ObjectMeta.DeepCopy(), Spec: *t.Template.Spec.DeepCopy()}
		pod.Namespace = pr.Namespace
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[provv1.AnnotationConsume] = pr.Name
		out = append(out, simulator.PodSet{Name: fmt.Sprintf("%d-%s", i, ps.PodTemplateRef.Name), Pod: pod, Count: int(ps.Count)})
	}
	return out, "", nil
}

// cluster is the simulation's starting point for pr: nodes (but those of
// other requests' scale-ups in flight), bound pods that hold capacity, and
// every Reservation with a node, as a pod holding what its owners have not
// taken.
func (r *Reconciler) cluster(ctx context.Context, pr *provv1.ProvisioningRequest) (simulator.Cluster, error) {
	var c simulator.Cluster
	nodes, err := r.Nodes.List(labels.Everything())
	if err != nil {
		return c, err
	}
	others, err := r.inFlightAttempts(ctx, pr)
	if err != nil {
		return c, err
	}
	for _, n := range nodes {
		if attempt, ok := n.Labels[nodegroups.LabelAttempt]; !ok || !others[attempt] {
			c.Nodes = append(c.Nodes, n)
		}
	}
	pods, err := r.Pods.List(labels.Everything())
	if err != nil {
		return c, err
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			c.Pods = append(c.Pods, p)
		}
	}
	var rs schedv1alpha1.ReservationList
	// Read only: the cache's own objects, not copies.
	if err := r.Client.List(ctx, &rs, client.UnsafeDisableDeepCopy); err != nil {
		return c, err
	}
	all := r.withAssumed(rs.Items)
	for i := range all {
		if p := reservationPod(&all[i]); p != nil {
			c.Pods = append(c.Pods, p)
		}
	}
	return c, nil
}

// assumeFor is how long a booking just made stands in the simulation
// before the cache shows it; after that the cache is the truth.
const assumeFor = time.Minute

// assume records Reservations being created, for the simulations that run
// before the cache shows them.
func (r *Reconciler) assume(rs []*schedv1alpha1.Reservation) {
	r.assumedMu.Lock()
	defer r.assumedMu.Unlock()
	if r.assumed == nil {
		r.assumed = map[string]assumedReservation{}
	}
	now := r.Clock.Now()
	for _, res := range rs {
		r.assumed[res.Name] = assumedReservation{res: res, at: now}
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

// reservationPod is the pod standing for the capacity a Reservation holds,
// or nil when it holds none.
func reservationPod(res *schedv1alpha1.Reservation) *v1.Pod {
	t := res.Spec.Template
	var node string
	requests := t.Requests
	switch res.Status.Phase {
	case schedv1alpha1.ReservationAvailable:
		node = res.Status.NodeName
		requests = quota.RemoveZeros(quota.SubtractWithNonNegativeResult(t.Requests, res.Status.Allocated))
	case "", schedv1alpha1.ReservationPending:
		node = t.NodeName // a booking being placed already names its node
	}
	if node == "" {
		return nil
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: res.Name, UID: res.UID, Namespace: "reservations"},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "reserved",
			Resources: v1.ResourceRequirements{Requests: requests}, Ports: t.HostPorts}}},
	}
}

func expand(sets []simulator.PodSet) []*v1.Pod {
	var out []*v1.Pod
	for _, s := range sets {
		for range s.Count {
			out = append(out, s.Pod)
		}
	}
	return out
}

func countPods(sets []simulator.PodSet) int {
	n := 0
	for _, s := range sets {
		n += s.Count
	}
	return n
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
