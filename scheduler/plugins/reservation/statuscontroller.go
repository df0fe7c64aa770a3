package reservation

import (
	"context"
	"fmt"
	"reflect"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	schedlisters "github.com/gantry-dev/gantry/crds/client/listers/scheduling/v1alpha1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/internal/plant"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// statusWorkers is how many reservations the status controller writes at once.
const statusWorkers = 4

// statusController writes what the scheduler knows into reservations'
// status, and ends their lives: expiry, node deletion, consumption by an
// owner, garbage collection of terminal reservations. It runs only on the
// leader, as a plugin controller.
type statusController struct {
	client      gantryclient.Interface
	reservation schedlisters.ReservationLister
	nodes       corelisters.NodeLister
	store       *store
	queue       workqueue.TypedRateLimitingInterface[string]
	clock       clock.Clock
	terminalTTL time.Duration
	synced      []cache.InformerSynced
}

// NewControllers returns the reservation status controller.
func (pl *Plugin) NewControllers() ([]frameworkext.Controller, error) {
	h := pl.handle
	rinf := h.GantryInformerFactory().Scheduling().V1alpha1().Reservations()
	ninf := h.SharedInformerFactory().Core().V1().Nodes()
	c := &statusController{
		client:      h.GantryClientSet(),
		reservation: rinf.Lister(),
		nodes:       ninf.Lister(),
		store:       pl.store,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "reservation-status"}),
		clock:       clock.RealClock{},
		terminalTTL: pl.shared.args.TerminalReservationTTL.Duration,
		synced:      []cache.InformerSynced{rinf.Informer().HasSynced, ninf.Informer().HasSynced},
	}
	pl.store.setNotify(c.queue.Add)
	if _, err := ninf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) { c.nodeGone(obj) },
	}); err != nil {
		return nil, err
	}
	return []frameworkext.Controller{c}, nil
}

func (c *statusController) Name() string { return "reservation-status" }

// Run reconciles until ctx ends.
func (c *statusController) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	// Every reservation gets a first look: expiry timers live in memory.
	if all, err := c.reservation.List(labels.Everything()); err == nil {
		for _, r := range all {
			c.queue.Add(r.Name)
		}
	}
	// Reservations are independent objects and the queue never hands one
	// key to two workers: several write at once, so that a burst (owners
	// consuming thousands of reservations) is reflected in status within
	// seconds, not minutes, of API round trips.
	for range statusWorkers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
}

func (c *statusController) nodeGone(obj any) {
	n, ok := obj.(*v1.Node)
	if !ok {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			n, _ = t.Obj.(*v1.Node)
		}
	}
	if n == nil {
		return
	}
	for _, nr := range c.store.onNode(n.Name) {
		c.queue.Add(nr.Name)
	}
}

func (c *statusController) worker(ctx context.Context) {
	for {
		key, quit := c.queue.Get()
		if quit {
			return
		}
		after, err := c.reconcile(ctx, key)
		switch {
		case err != nil:
			klog.FromContext(ctx).V(2).Info("Reconciling reservation failed; retrying", "reservation", key, "err", err)
			c.queue.AddRateLimited(key)
		default:
			c.queue.Forget(key)
			if after > 0 {
				c.queue.AddAfter(key, after)
			}
		}
		c.queue.Done(key)
	}
}

// reconcile brings one reservation's status up to date. It returns when to
// look again (expiry, garbage collection), if ever.
func (c *statusController) reconcile(ctx context.Context, name string) (time.Duration, error) {
	r, err := c.reservation.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	now := c.clock.Now()
	want := r.DeepCopy()
	var again time.Duration

	switch phase := r.Status.Phase; phase {
	case schedv1alpha1.ReservationSucceeded, schedv1alpha1.ReservationFailed:
		ended := terminalSince(r)
		if left := ended.Add(c.terminalTTL).Sub(now); left > 0 {
			return left, nil
		}
		uid := r.UID
		err := c.client.SchedulingV1alpha1().Reservations().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return 0, nil
		}
		return 0, err
	}

	if exp, ok := Expiry(r); ok && !now.Before(exp) {
		c.fail(want, schedv1alpha1.ReasonExpired, fmt.Sprintf("expired at %s", exp.UTC().Format(time.RFC3339)))
	} else {
		if ok {
			again = exp.Sub(now)
		}
		switch want.Status.Phase {
		case "", schedv1alpha1.ReservationPending:
			want.Status.Phase = schedv1alpha1.ReservationPending
			msg := c.store.unschedulableMessage(r.UID)
			if msg != "" {
				setCondition(want, schedv1alpha1.ConditionScheduled, metav1.ConditionFalse, schedv1alpha1.ReasonUnschedulable, msg)
			} else if meta.FindStatusCondition(want.Status.Conditions, schedv1alpha1.ConditionScheduled) == nil {
				setCondition(want, schedv1alpha1.ConditionScheduled, metav1.ConditionFalse, "Pending", "waiting to be scheduled")
			}
			setCondition(want, schedv1alpha1.ConditionReady, metav1.ConditionFalse, "Pending", "not placed on a node yet")
		case schedv1alpha1.ReservationAvailable:
			if _, err := c.nodes.Get(r.Status.NodeName); apierrors.IsNotFound(err) {
				c.fail(want, schedv1alpha1.ReasonNodeDeleted, fmt.Sprintf("node %s was deleted", r.Status.NodeName))
				break
			}
			c.recordOwners(want)
			if Consumed(want) && !plant.Reservation {
				want.Status.Phase = schedv1alpha1.ReservationSucceeded
				o := want.Status.CurrentOwners[0]
				setCondition(want, schedv1alpha1.ConditionReady, metav1.ConditionFalse, schedv1alpha1.ReasonAllocated,
					fmt.Sprintf("allocated to pod %s/%s; what it does not use is released", o.Namespace, o.Name))
				again = c.terminalTTL
			}
		}
	}
	if want.Status.Phase == schedv1alpha1.ReservationFailed {
		again = c.terminalTTL
	}
	if reflect.DeepEqual(want.Status, r.Status) {
		return again, nil
	}
	_, err = c.client.SchedulingV1alpha1().Reservations().UpdateStatus(ctx, want, metav1.UpdateOptions{FieldManager: "gantry-scheduler"})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err == nil && want.Status.Phase != r.Status.Phase {
		reason := ""
		if cond := meta.FindStatusCondition(want.Status.Conditions, schedv1alpha1.ConditionReady); cond != nil {
			reason = cond.Reason
		}
		transitions.WithLabelValues(string(want.Status.Phase), reason).Inc()
	}
	return again, err
}

func (c *statusController) fail(r *schedv1alpha1.Reservation, reason, msg string) {
	r.Status.Phase = schedv1alpha1.ReservationFailed
	setCondition(r, schedv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
}

// recordOwners copies the bound owner pods and their summed requests into status.
func (c *statusController) recordOwners(r *schedv1alpha1.Reservation) {
	owners := c.store.boundOwners(r.UID, r.Status.NodeName)
	if len(owners) == 0 {
		// Keep what was recorded: an owner that has finished still consumed it.
		return
	}
	refs := make([]v1.ObjectReference, 0, len(owners))
	var reqs []v1.ResourceList
	for _, a := range owners {
		refs = append(refs, v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: a.pod.Namespace, Name: a.pod.Name, UID: a.uid})
		reqs = append(reqs, a.requests)
	}
	r.Status.CurrentOwners = refs
	allocated := Sum(reqs...)
	// Only what the reservation holds is allocated from it.
	for name := range allocated {
		if _, ok := r.Spec.Template.Requests[name]; !ok {
			delete(allocated, name)
		}
	}
	for name, q := range allocated {
		if held := r.Spec.Template.Requests[name]; q.Cmp(held) > 0 {
			allocated[name] = held.DeepCopy()
		}
	}
	if len(allocated) == 0 {
		allocated = nil
	}
	r.Status.Allocated = normalize(allocated)
}

func normalize(l v1.ResourceList) v1.ResourceList {
	for k, q := range l {
		l[k] = resource.MustParse(q.String())
	}
	return l
}

func terminalSince(r *schedv1alpha1.Reservation) time.Time {
	if c := meta.FindStatusCondition(r.Status.Conditions, schedv1alpha1.ConditionReady); c != nil {
		return c.LastTransitionTime.Time
	}
	return r.CreationTimestamp.Time
}

// setCondition sets a condition of r, observed at r's generation.
func setCondition(r *schedv1alpha1.Reservation, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: r.Generation,
	})
}
