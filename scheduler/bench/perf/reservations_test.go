//go:build scheduler_perf

package perf

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/test/util"
)

// createReservations creates n reservations, each holding one pod's
// requests for app=owner pods of namespace "owners"
// (benchutil.OwnerReservation), and waits until the scheduler has made them
// all Available.
func createReservations(tCtx ktesting.TContext, n int) error {
	cfg := *tCtx.RESTConfig()
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	client, err := gantryclient.NewForConfig(&cfg)
	if err != nil {
		return err
	}
	rs := client.SchedulingV1alpha1().Reservations()
	for i := range n {
		if _, err := rs.Create(tCtx, benchutil.OwnerReservation(i), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating reservation %d: %w", i, err)
		}
	}
	var available int
	err = util.PollSlowly(tCtx, util.BenchmarkTimeout, fmt.Sprintf("%d reservations Available", n), func(ctx context.Context) (bool, error) {
		list, err := rs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		available = benchutil.CountPhase(list.Items, schedv1alpha1.ReservationAvailable)
		return available == n, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d reservations Available: %w", available, n, err)
	}
	tCtx.Logf("%d reservations Available", n)
	// At the end of the workload, show that owners did use them: a
	// throughput measured without reservations in play would prove nothing.
	// Owners bound with the allocation annotation are what owners took; an
	// informer sees every owner pod, including those a steady-state
	// workload deletes once bound. The Succeeded phase is the status
	// controller's record of it, which may lag behind.
	owners, err := watchOwners(tCtx)
	if err != nil {
		return err
	}
	tCtx.Cleanup(func() {
		ctx := context.Background()
		list, err := rs.List(ctx, metav1.ListOptions{})
		if err != nil {
			tCtx.Logf("listing reservations: %v", err)
			return
		}
		succeeded := benchutil.CountPhase(list.Items, schedv1alpha1.ReservationSucceeded)
		// The informer may trail the last bindings by a moment; the pods
		// still there are read once more from the API.
		left, err := tCtx.Client().CoreV1().Pods("owners").List(ctx, metav1.ListOptions{})
		if err != nil {
			tCtx.Logf("listing owner pods: %v", err)
			return
		}
		for i := range left.Items {
			owners.observe(&left.Items[i], false)
		}
		seen, allocated := owners.counts()
		tCtx.Logf("%d of %d owner pods bound into a reservation; %d of %d reservations Succeeded", allocated, seen, succeeded, n)
		latency, timed := owners.latency()
		tCtx.Logf("owner latency into a reservation (created to bound, as a watch sees it) over %d owners: %v ms", timed, latency)
		unreserved, untimed := owners.unreservedLatency()
		if untimed > 0 {
			tCtx.Logf("latency of owners bound without a reservation, over %d owners: %v ms", untimed, unreserved)
		}
		// For perfreport: how many owner pods the workload had, how many
		// were bound into a reservation, how many reservations were
		// Succeeded at its end, and the latency (over the timed owners) of
		// the owners bound into a reservation and of those bound without
		// one.
		if err := benchutil.AppendJSON(benchutil.ReservationsFile, map[string]any{"benchmark": tCtx.Name(), "reservations": n,
			"ownerPods": seen, "ownersInReservations": allocated, "succeeded": succeeded,
			"ownerLatencyMs": latency, "ownersTimed": timed,
			"unreservedOwnerLatencyMs": unreserved, "unreservedOwnersTimed": untimed}); err != nil {
			tCtx.Logf("recording consumed reservations: %v", err)
		}
	})
	return nil
}

// ownerWatch counts the owner pods (namespace "owners") a workload made, and
// those bound with an allocation, from a pod watch: pods deleted after
// binding count too. It also times each owner it saw unbound, from the
// event that showed it created to the one that showed it bound: an
// owner's latency as a client watching pods sees it, exact where the
// scheduler's SLI histogram has only power-of-two buckets.
type ownerWatch struct {
	mu        sync.Mutex
	seen      sets.Set[types.UID]
	allocated sets.Set[types.UID]
	created   map[types.UID]time.Time
	// latencies of the owners bound into a reservation, and of those bound
	// without one (more owners than reservations): the second are pods
	// like any other, queued behind every pod created before them.
	latencies, unreserved []time.Duration
}

// watchOwners watches the owner pods until the workload's end.
func watchOwners(tCtx ktesting.TContext) (*ownerWatch, error) {
	w := &ownerWatch{seen: sets.New[types.UID](), allocated: sets.New[types.UID](), created: map[types.UID]time.Time{}}
	stop, err := benchutil.WatchPods(tCtx.Client(), "owners", func(p *v1.Pod) { w.observe(p, true) })
	if err != nil {
		return nil, err
	}
	tCtx.Cleanup(stop)
	return w, nil
}

// observe records an owner pod; timed is false for a pod read from a list,
// whose state may be older than now.
func (w *ownerWatch) observe(p *v1.Pod, timed bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen.Insert(p.UID)
	if !timed {
		if p.Spec.NodeName != "" && p.Annotations[schedv1alpha1.AnnotationAllocated] != "" {
			w.allocated.Insert(p.UID)
		}
		return
	}
	if p.Spec.NodeName == "" {
		if _, ok := w.created[p.UID]; !ok {
			w.created[p.UID] = now
		}
		return
	}
	inReservation := p.Annotations[schedv1alpha1.AnnotationAllocated] != ""
	if inReservation {
		w.allocated.Insert(p.UID)
	}
	if t, ok := w.created[p.UID]; ok {
		if inReservation {
			w.latencies = append(w.latencies, now.Sub(t))
		} else {
			w.unreserved = append(w.unreserved, now.Sub(t))
		}
		delete(w.created, p.UID)
	}
}

// latency returns the p50, p90 and p99 and the highest of the latencies
// of the owners bound into a reservation (benchutil.LatencyPercentiles),
// and how many were timed; unreservedLatency the same for owners bound
// without one.
func (w *ownerWatch) latency() (pct map[string]float64, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return benchutil.LatencyPercentiles(w.latencies)
}

func (w *ownerWatch) unreservedLatency() (pct map[string]float64, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return benchutil.LatencyPercentiles(w.unreserved)
}

func (w *ownerWatch) counts() (seen, allocated int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen.Len(), w.allocated.Len()
}
