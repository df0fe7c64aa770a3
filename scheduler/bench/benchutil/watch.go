package benchutil

import (
	"context"
	"errors"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// WatchPods calls observe with every pod of namespace ("" for all) that an
// informer of its own sees added or updated, from once it has synced until
// stop is called. observe runs on the informer's goroutine, one call at a
// time.
func WatchPods(client kubernetes.Interface, namespace string, observe func(*v1.Pod)) (stop func(), err error) {
	inf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace)).Core().V1().Pods().Informer()
	handle := func(obj any) {
		if p, ok := obj.(*v1.Pod); ok {
			observe(p)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, errors.New("the pod informer did not sync")
	}
	return cancel, nil
}

// BoundPods counts, from WatchPods, the pods bound and those of them bound
// into a reservation (with the allocation annotation when first seen
// bound).
type BoundPods struct {
	mu        sync.Mutex
	bound     map[types.UID]bool // true: bound into a reservation
	allocated int
	stop      func()
}

// CountBoundPods starts counting the pods of every namespace.
func CountBoundPods(client kubernetes.Interface) (*BoundPods, error) {
	w := &BoundPods{bound: map[types.UID]bool{}}
	stop, err := WatchPods(client, "", w.observe)
	if err != nil {
		return nil, err
	}
	w.stop = stop
	return w, nil
}

func (w *BoundPods) observe(p *v1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.bound[p.UID]; seen {
		return
	}
	inReservation := p.Annotations[schedv1alpha1.AnnotationAllocated] != ""
	w.bound[p.UID] = inReservation
	if inReservation {
		w.allocated++
	}
}

// Counts is how many pods were seen bound, and how many of them into a
// reservation.
func (w *BoundPods) Counts() (bound, allocated int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bound), w.allocated
}

// Stop stops the watch.
func (w *BoundPods) Stop() { w.stop() }
