package asyncpreemption

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/scheduler/util"
	"k8s.io/utils/clock"

	schedclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned/typed/scheduling/v1alpha1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/internal/plant"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// executor runs preemptions' API work off the scheduling cycle.
type executor struct {
	fh      fwk.Handle
	timeout time.Duration
	sem     chan struct{} // victim API calls in flight, across preemptions
	clock   clock.WithDelayedExecution

	mu sync.Mutex
	// inflight: preemptors whose API work runs; PreEnqueue gates them.
	inflight map[types.UID]bool
	// deleting: victims some preemption is preempting right now, or did
	// recently (until the scheduler's cache has had time to see them go),
	// so that no victim is preempted twice.
	deleting map[types.UID]time.Time
	// recent: per preemptor, the node and victims of its last successful
	// preemption, for PostFilter not to preempt again before they are gone.
	recent map[types.UID]recentPreemption
	// failures counts consecutive failed preemptions per preemptor, for
	// backoff. Entries of preemptors that are gone (deleted, recreated or
	// bound) or that have not failed for failureMemory are pruned.
	failures map[types.UID]failure
	// lastScan is when prune last looked up the preemptors of failures and
	// recent (at most once per pruneInterval).
	lastScan time.Time
	// preemptorGone reports whether the pod preemptor namespace/name with
	// uid is gone: deleted, recreated under another UID, or bound. nil:
	// not known (entries are then pruned by age only). Reservations are
	// not pods: theirs are pruned by age only.
	preemptorGone func(namespace, name string, uid types.UID) bool
	// backoffUntil: preemptors PreEnqueue holds back after a failure.
	backoffUntil map[types.UID]time.Time
	wg           sync.WaitGroup
	// inCache reports whether the scheduler's cache still holds a victim
	// that is worth waiting for (aboutToLeave; set by AttachScheduler;
	// nil: not known).
	inCache func(*v1.Pod) bool
	// reservations fails reservations chosen as victims; nil without
	// Gantry's extended handle (then no reservation is ever a victim
	// candidate with lower priority than its cached pod's).
	reservations schedclient.ReservationInterface
	// lookupProvider finds what the Reservation plugin provides
	// (reservepod.ProviderOf): the nominations of preempting reservations
	// and the check of owner pods' allocations; nil without Gantry's
	// extended handle (then there is no Reservation plugin). It is looked up
	// on use: plugins are built in any order.
	lookupProvider func() reservepod.Provider
}

func newExecutor(fh fwk.Handle, maxConcurrent int, timeout time.Duration) *executor {
	return &executor{
		fh: fh, timeout: timeout, sem: make(chan struct{}, maxConcurrent), clock: clock.RealClock{},
		inflight: map[types.UID]bool{}, deleting: map[types.UID]time.Time{}, failures: map[types.UID]failure{},
		recent: map[types.UID]recentPreemption{}, backoffUntil: map[types.UID]time.Time{},
	}
}

// running reports whether the preemptor's API work is in flight.
func (e *executor) running(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inflight[uid]
}

// backingOff reports whether the preemptor waits out the backoff of a failed
// preemption. Clearing its nomination is an update other handlers react to
// (upstream requeues pods of lower or equal priority as if a pod had been
// deleted), so the gate, not the timer, is what holds it back.
func (e *executor) backingOff(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	until, ok := e.backoffUntil[uid]
	if ok && !e.clock.Now().Before(until) {
		delete(e.backoffUntil, uid)
		return false
	}
	return ok
}

// start preempts victims on node for preemptor, asynchronously. The
// preemptor is gated until the work ends and then re-activated, whatever
// the result.
func (e *executor) start(preemptor *v1.Pod, node string, candidates []*v1.Pod) {
	e.mu.Lock()
	e.prune()
	var todo []*v1.Pod
	for _, v := range candidates {
		// Already terminating, or preempted by someone else: its deletion
		// is under way; another call would be a double delete.
		if _, ok := e.deleting[v.UID]; ok || v.DeletionTimestamp != nil {
			continue
		}
		e.deleting[v.UID] = time.Time{} // in flight
		todo = append(todo, v)
	}
	e.inflight[preemptor.UID] = true
	e.wg.Add(1)
	e.mu.Unlock()

	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
		defer cancel()
		logger := klog.FromContext(ctx).WithValues("preemptor", klog.KObj(preemptor), "node", node)
		began := e.clock.Now()
		e.clearLowerNominations(ctx, logger, preemptor, node)
		err := e.preemptAll(ctx, logger, preemptor, node, todo)
		took := e.clock.Since(began)
		if err == nil {
			e.awaitLeaving(todo)
		}
		result := resultSuccess
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			result = resultCancelled
		case err != nil:
			result = resultError
		}
		// Labels are taken now, from the real outcome.
		goroutineDuration.WithLabelValues(result).Observe(took.Seconds())
		goroutineTotal.WithLabelValues(result).Inc()
		e.finish(logger, preemptor, node, todo, began, err)
	}()
}

// leaveWait bounds how long a successful preemption keeps its preemptor
// gated for the victims to leave the scheduler's cache.
const leaveWait = 5 * time.Second

// awaitLeaving waits, up to leaveWait, until no victim stands in the
// scheduler's cache any more, except those terminating with a grace period
// or finalizers, which may stay for long (PostFilter's pendingVictims check
// and their deletion events take over; see aboutToLeave). A victim deleted
// with no grace period is waited for: its deletion timestamp reaches the
// cache a moment before its removal does. Re-activated earlier, the
// preemptor would fail a whole cycle on the room its victims still hold;
// re-activated now it fits at once.
func (e *executor) awaitLeaving(victims []*v1.Pod) {
	if e.inCache == nil || len(victims) == 0 {
		return
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, leaveWait, true, func(context.Context) (bool, error) {
		for _, v := range victims {
			if e.inCache(v) {
				return false, nil
			}
		}
		return true, nil
	})
}

// preemptAll preempts victims with bounded concurrency; it stops at the
// first failure and does not start the rest.
func (e *executor) preemptAll(ctx context.Context, logger klog.Logger, preemptor *v1.Pod, node string, todo []*v1.Pod) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, v := range todo {
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return context.Cause(ctx)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-e.sem }()
			if err := e.preemptOne(ctx, logger, preemptor, node, v); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// preemptOne marks the victim as a disruption target and deletes it; a
// victim waiting on permit is rejected in memory instead. A victim that is
// already gone counts as preempted.
func (e *executor) preemptOne(ctx context.Context, logger klog.Logger, preemptor *v1.Pod, node string, victim *v1.Pod) error {
	if reservepod.Is(victim) {
		return e.failReservation(ctx, logger, preemptor, victim)
	}
	if wp := e.fh.GetWaitingPod(victim.UID); wp != nil && wp.Preempt(Name, "preempted") {
		victims.Inc()
		return nil
	}
	cs := e.fh.ClientSet()
	status := victim.Status.DeepCopy()
	if podutil.UpdatePodCondition(status, &v1.PodCondition{
		Type:    v1.DisruptionTarget,
		Status:  v1.ConditionTrue,
		Reason:  v1.PodReasonPreemptionByScheduler,
		Message: fmt.Sprintf("%s: preempting to accommodate a higher priority pod", preemptor.Spec.SchedulerName),
	}) {
		if err := util.PatchPodStatus(ctx, cs, victim.Name, victim.Namespace, &victim.Status, status); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("marking victim %s as a disruption target: %w", klog.KObj(victim), err)
		}
	}
	if err := util.DeletePod(ctx, cs, victim); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("deleting victim %s: %w", klog.KObj(victim), err)
	}
	victims.Inc()
	logger.V(2).Info("Preempted victim", "victim", klog.KObj(victim))
	if reservepod.Is(preemptor) {
		// The related object must exist: a reservation is no Pod.
		e.fh.EventRecorder().Eventf(victim, nil, v1.EventTypeNormal, "Preempted", "Preempting",
			"Preempted by reservation %s on node %s", preemptor.Name, node)
		return nil
	}
	e.fh.EventRecorder().Eventf(victim, preemptor, v1.EventTypeNormal, "Preempted", "Preempting",
		"Preempted by pod %s on node %s", preemptor.UID, node)
	return nil
}

// finish ends a preemption that began at began: the victims are released,
// and the preemptor is let through PreEnqueue and re-activated, at once
// after success, after a backoff after a failure, which also clears its
// nomination. The backoff counts from when the preemption began, as a
// pod's backoff in the scheduling queue counts from its attempt: the time
// its failing API calls took (a rate-limited client waits its turn for
// each) is not added to every retry's wait.
func (e *executor) finish(logger klog.Logger, preemptor *v1.Pod, node string, todo []*v1.Pod, began time.Time, err error) {
	e.mu.Lock()
	now := e.clock.Now()
	for _, v := range todo {
		if err == nil {
			e.deleting[v.UID] = now // done: remembered for victimMemory
		} else {
			delete(e.deleting, v.UID)
		}
	}
	delete(e.inflight, preemptor.UID)
	if err == nil {
		uids := make([]types.UID, 0, len(todo))
		for _, v := range todo {
			uids = append(uids, v.UID)
		}
		e.recent[preemptor.UID] = recentPreemption{namespace: preemptor.Namespace, name: preemptor.Name,
			reservation: reservepod.Is(preemptor), node: node, victims: uids, at: now}
	}
	var backoff time.Duration
	var until time.Time
	if err != nil {
		f := e.failures[preemptor.UID]
		f.count++
		f.at, f.namespace, f.name, f.reservation = now, preemptor.Namespace, preemptor.Name, reservepod.Is(preemptor)
		e.failures[preemptor.UID] = f
		backoff = min(time.Second<<min(f.count-1, 4), 10*time.Second)
		until = began.Add(backoff)
		// Gated at least until its nomination is cleared (below): a new
		// attempt meanwhile could nominate it again, and the clearing
		// would then erase that nomination.
		e.backoffUntil[preemptor.UID] = now.Add(e.timeout)
	} else {
		delete(e.failures, preemptor.UID)
	}
	e.prune()
	e.mu.Unlock()

	pods := map[string]*v1.Pod{preemptor.Namespace + "/" + preemptor.Name: preemptor}
	if err == nil {
		logger.V(2).Info("Preemption finished", "victims", len(todo))
		if plant.Preemption {
			e.mu.Lock()
			e.backoffUntil[preemptor.UID] = e.clock.Now().Add(time.Hour)
			e.mu.Unlock()
			return
		}
		e.fh.Activate(logger, pods)
		return
	}
	logger.Error(err, "Preemption failed; clearing the nomination and retrying after a backoff", "backoff", backoff)
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	if perr := e.clearNomination(ctx, preemptor); perr != nil {
		logger.Error(perr, "Clearing the preemptor's nominated node")
	}
	e.mu.Lock()
	e.backoffUntil[preemptor.UID] = until
	e.mu.Unlock()
	e.clock.AfterFunc(max(until.Sub(e.clock.Now()), 0), func() {
		e.mu.Lock()
		delete(e.backoffUntil, preemptor.UID)
		e.mu.Unlock()
		e.fh.Activate(logger, pods)
	})
}

// clearNomination clears pod's nomination in memory and in its status. A
// reservation's pod is nominated in memory only.
func (e *executor) clearNomination(ctx context.Context, p *v1.Pod) error {
	if reservepod.Is(p) {
		if n := e.provider(); n != nil {
			n.ClearNomination(p.UID)
		}
		return nil
	}
	e.fh.DeleteNominatedPodIfExists(p)
	patch := []byte(`{"status":{"nominatedNodeName":null}}`)
	_, err := e.fh.ClientSet().CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// provider returns what the Reservation plugin provides (its store), or
// nil when no Reservation plugin runs: then no reservation is nominated
// anywhere, and no pod is placed in a reservation, whatever its
// annotations say.
func (e *executor) provider() reservepod.Provider {
	if e.lookupProvider == nil {
		return nil
	}
	return e.lookupProvider()
}

// allocations returns what checks owner pods' reservations, or nil when no
// Reservation plugin runs (provider).
func (e *executor) allocations() reservepod.Allocations { return e.provider() }

// wait waits for every started preemption to finish (tests, shutdown).
func (e *executor) wait() { e.wg.Wait() }

// failReservation preempts a reservation: it becomes Failed (reason
// Preempted), which releases its capacity. A reservation that is gone, was
// recreated or is no longer Available counts as preempted.
func (e *executor) failReservation(ctx context.Context, logger klog.Logger, preemptor, victim *v1.Pod) error {
	if e.reservations == nil {
		return fmt.Errorf("cannot preempt reservation %s without Gantry's clientset", victim.Name)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := e.reservations.Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r.UID != victim.UID || r.Status.Phase != schedv1alpha1.ReservationAvailable {
			return nil
		}
		r = r.DeepCopy()
		r.Status.Phase = schedv1alpha1.ReservationFailed
		meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
			Type: schedv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: schedv1alpha1.ReasonPreempted,
			Message:            fmt.Sprintf("preempted by pod %s/%s (priority %d)", preemptor.Namespace, preemptor.Name, podPriority(preemptor)),
			ObservedGeneration: r.Generation,
		})
		_, err = e.reservations.UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: "gantry-scheduler"})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("preempting reservation %s: %w", victim.Name, err)
	}
	victims.Inc()
	logger.V(2).Info("Preempted reservation", "reservation", victim.Name)
	return nil
}

func podPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// victimMemory is how long a preempted victim, or a preemptor's last
// victims, are remembered: long enough for the scheduler's cache to see
// them go.
const victimMemory = time.Minute

type recentPreemption struct {
	namespace, name string
	reservation     bool
	node            string
	victims         []types.UID
	at              time.Time
}

// failure is a preemptor's run of failed preemptions.
type failure struct {
	count           int
	at              time.Time // of the last one
	namespace, name string
	reservation     bool
}

// failureMemory is how long a preemptor's failures count towards its
// backoff (at most 10s) after the last one. A preemptor that has not failed
// for that long starts again at the shortest backoff.
const failureMemory = time.Minute

// pruneInterval is how often prune looks up the preemptors it remembers.
const pruneInterval = 10 * time.Second

// prune forgets victims and preemptions older than victimMemory, failures
// older than failureMemory, and, at most once per pruneInterval, the
// failures and last preemption of preemptors that are gone (deleted,
// recreated or bound). So the executor remembers nothing of a preemptor
// that is not pending any more. Callers hold e.mu.
func (e *executor) prune() {
	now := e.clock.Now()
	for uid, at := range e.deleting {
		if !at.IsZero() && now.Sub(at) > victimMemory {
			delete(e.deleting, uid)
		}
	}
	scan := e.preemptorGone != nil && now.Sub(e.lastScan) >= pruneInterval
	if scan {
		e.lastScan = now
	}
	gone := func(uid types.UID, namespace, name string, reservation bool) bool {
		return scan && !reservation && !e.inflight[uid] && e.preemptorGone(namespace, name, uid)
	}
	for uid, r := range e.recent {
		if now.Sub(r.at) > victimMemory || gone(uid, r.namespace, r.name, r.reservation) {
			delete(e.recent, uid)
		}
	}
	for uid, f := range e.failures {
		if now.Sub(f.at) > failureMemory || gone(uid, f.namespace, f.name, f.reservation) {
			delete(e.failures, uid)
		}
	}
}

// preemptorGone returns the executor's preemptorGone on a pod lister: a
// preemptor is gone when the lister has no pod of its name, or one with
// another UID, or the pod is bound.
func preemptorGone(lister corelisters.PodLister) func(namespace, name string, uid types.UID) bool {
	return func(namespace, name string, uid types.UID) bool {
		p, err := lister.Pods(namespace).Get(name)
		if apierrors.IsNotFound(err) {
			return true
		}
		return err == nil && (p.UID != uid || p.Spec.NodeName != "")
	}
}

// pendingVictims returns the node of the preemptor's last preemption if any
// of its victims is still there (by stillThere); then the preemptor must
// wait for them to go rather than preempt again.
func (e *executor) pendingVictims(preemptor types.UID, stillThere func(node string, uid types.UID) bool) (string, bool) {
	e.mu.Lock()
	r, ok := e.recent[preemptor]
	e.mu.Unlock()
	if !ok || e.clock.Since(r.at) > victimMemory {
		return "", false
	}
	for _, v := range r.victims {
		if stillThere(r.node, v) {
			return r.node, true
		}
	}
	return "", false
}

// preempted reports whether a preemption is deleting the pod, or deleted it
// recently.
func (e *executor) preempted(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.deleting[uid]
	return ok
}

// clearLowerNominations clears the nomination of lower-priority pods
// nominated to node, as upstream does: they may no longer fit there, and
// the update sends them back to the queue to find another place sooner.
// Failing to clear one is not fatal to the preemption.
func (e *executor) clearLowerNominations(ctx context.Context, logger klog.Logger, preemptor *v1.Pod, node string) {
	prio := podPriority(preemptor)
	var nominees []*v1.Pod
	if n := e.provider(); n != nil {
		nominees = n.NominatedOn(node)
	}
	for _, pi := range e.fh.NominatedPodsForNode(node) {
		nominees = append(nominees, pi.GetPod())
	}
	for _, p := range nominees {
		if p.UID == preemptor.UID || podPriority(p) >= prio {
			continue
		}
		if err := e.clearNomination(ctx, p); err != nil {
			logger.Error(err, "Clearing a lower-priority pod's nomination", "pod", klog.KObj(p))
		}
		if reservepod.Is(p) {
			// No status update will requeue it: it looks for another place now.
			e.fh.Activate(logger, map[string]*v1.Pod{p.Name: p})
		}
	}
}

// preemptedNow copies the set of victims being, or recently, preempted.
func (e *executor) preemptedNow() sets.Set[types.UID] {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(sets.Set[types.UID], len(e.deleting))
	for uid := range e.deleting {
		out.Insert(uid)
	}
	return out
}
