package reservation

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/reservepod"
)

// podCache is the part of the scheduler's cache the store drives.
type podCache interface {
	AddPod(logger klog.Logger, pod *v1.Pod) error
	UpdatePod(logger klog.Logger, oldPod, newPod *v1.Pod) error
	RemovePod(logger klog.Logger, pod *v1.Pod) error
	ForgetPod(logger klog.Logger, pod *v1.Pod) error
	GetPod(pod *v1.Pod) (*v1.Pod, error)
	IsAssumedPod(pod *v1.Pod) (bool, error)
}

// podQueue is the part of the scheduling queue the store drives.
type podQueue interface {
	Add(ctx context.Context, pod *v1.Pod)
	Delete(logger klog.Logger, pod *v1.Pod)
	AddUnschedulablePodIfNotPresent(logger klog.Logger, pInfo *framework.QueuedPodInfo, podSchedulingCycle int64) error
	SchedulingCycle() int64
	Done(types.UID)
	MoveAllToActiveOrBackoffQueue(logger klog.Logger, event fwk.ClusterEvent, oldObj, newObj interface{}, preCheck queue.PreEnqueueCheck)
}

// attach connects the store to the scheduler's cache and queue and replays
// every known reservation into them.
func (s *store) attach(cache podCache, queue podQueue, profiles sets.Set[string]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache, s.queue = cache, queue
	s.profiles = profiles
	for _, e := range s.entries {
		s.reconcile(e)
	}
}

// reconcile makes the queue, the cache and the indexes agree with e.
// Callers hold s.mu.
func (s *store) reconcile(e *entry) {
	phase := e.phase()
	if phase != schedv1alpha1.ReservationPending {
		delete(s.nominated, e.r.UID)
	}
	if s.queue != nil {
		wantQueued := phase == schedv1alpha1.ReservationPending && s.profiles.Has(e.pod.Spec.SchedulerName)
		switch {
		case wantQueued && !e.queued:
			s.queue.Add(klog.NewContext(context.Background(), s.logger), e.pod)
			e.queued = true
		case !wantQueued && e.queued:
			s.queue.Delete(s.logger, e.pod)
			e.queued = false
		}
	}

	live := phase == schedv1alpha1.ReservationAvailable && e.r.Status.NodeName != "" && !s.consumed(e)
	if live && !e.indexed {
		s.index(e)
	} else if !live && e.indexed {
		s.unindex(e)
	}
	if s.cache == nil {
		return
	}
	switch {
	case live:
		e.live = reservepod.Cached(e.pod, e.r.Status.NodeName, s.remaining(e))
		s.cachePut(e.live)
	case phase == schedv1alpha1.ReservationPending:
		// While pending, the scheduler owns the reserve pod in its cache (it
		// assumes it when it picks a node, and forgets it if binding fails).
	case phase == schedv1alpha1.ReservationAvailable && s.consumed(e) && isZero(s.remaining(e)):
		// Consumed whole by its owner: the owner holds the capacity now,
		// nothing came free for waiting pods.
		s.uncacheQuietly(e.pod)
	default:
		s.uncache(e.pod)
	}
	if !live {
		e.live = nil
	}
}

func isZero(l v1.ResourceList) bool {
	for _, q := range l {
		if !q.IsZero() {
			return false
		}
	}
	return true
}

// cachePut puts want into the scheduler's cache, or updates what is there.
func (s *store) cachePut(want *v1.Pod) {
	cur, err := s.cache.GetPod(want)
	if err != nil { // not in the cache
		if err := s.cache.AddPod(s.logger, want); err != nil {
			s.logger.Error(err, "Adding reservation to the scheduler cache", "reservation", want.Name)
		}
		return
	}
	assumed, _ := s.cache.IsAssumedPod(want)
	if cur.Spec.NodeName != want.Spec.NodeName {
		// Never move a cached pod between nodes in place: the cache treats
		// that as corruption.
		s.uncache(cur)
		if err := s.cache.AddPod(s.logger, want); err != nil {
			s.logger.Error(err, "Adding reservation to the scheduler cache", "reservation", want.Name)
		}
		return
	}
	if assumed {
		// The scheduler assumed it when it placed the reservation; adding
		// confirms it, as the pod informer does for real pods.
		if err := s.cache.AddPod(s.logger, want); err != nil {
			s.logger.Error(err, "Confirming reservation in the scheduler cache", "reservation", want.Name)
		}
		return
	}
	if !equalRequests(cur, want) {
		if err := s.cache.UpdatePod(s.logger, cur, want); err != nil {
			s.logger.Error(err, "Updating reservation in the scheduler cache", "reservation", want.Name)
			return
		}
		s.freed(cur)
	}
}

// freed tells the scheduling queue that capacity held by p came free, as the
// scheduler does when an assigned pod goes away: pods waiting for it retry
// at once rather than at the next periodic flush.
func (s *store) freed(p *v1.Pod) {
	if s.queue != nil {
		s.queue.MoveAllToActiveOrBackoffQueue(s.logger, framework.EventAssignedPodDelete, p, nil, nil)
	}
}

func (s *store) uncache(p *v1.Pod) {
	if cur := s.uncacheQuietly(p); cur != nil {
		s.freed(cur)
	}
}

// uncacheQuietly removes the reservation from the cache and returns what
// the cache held, or nil.
func (s *store) uncacheQuietly(p *v1.Pod) *v1.Pod {
	if s.cache == nil {
		return nil
	}
	cur, err := s.cache.GetPod(p)
	if err != nil {
		return nil
	}
	if assumed, _ := s.cache.IsAssumedPod(cur); assumed {
		err = s.cache.ForgetPod(s.logger, cur)
	} else {
		err = s.cache.RemovePod(s.logger, cur)
	}
	if err != nil {
		s.logger.Error(err, "Removing reservation from the scheduler cache", "reservation", p.Name)
		return nil
	}
	return cur
}

func equalRequests(a, b *v1.Pod) bool {
	ra, rb := a.Spec.Containers[0].Resources.Requests, b.Spec.Containers[0].Resources.Requests
	if len(ra) != len(rb) {
		return false
	}
	for k, q := range ra {
		if o, ok := rb[k]; !ok || o.Cmp(q) != 0 {
			return false
		}
	}
	return true
}
