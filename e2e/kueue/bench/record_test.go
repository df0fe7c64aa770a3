//go:build kueue_bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	gantryinformers "github.com/gantry-dev/gantry/crds/client/informers/externalversions"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/kind/pkg/kueue"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
)

// admissions records, from informers of the benchmark's own, when each of
// a run's objects was seen reaching each step: the time an event handler
// was called, first time only. Workloads are tied to their Job and
// requests to their Workload by owner reference, when the run is summed up.
type admissions struct {
	mu sync.Mutex
	// jobCreated: the Job's Added event, by Job name.
	jobCreated map[string]time.Time
	// Workloads by name: their Job; QuotaReserved=True and Admitted=True.
	workloadJob               map[string]string
	quotaReserved, admittedAt map[string]time.Time
	// Requests by name: their Workload; Added; Provisioned=True or
	// Failed=True (decided), and whether Failed.
	requestWorkload           map[string]string
	requestCreated, decidedAt map[string]time.Time
	requestFailed             map[string]bool
	cancel                    context.CancelFunc
}

// record starts the run's recorders on namespace ns and waits until their
// informers have synced.
func (bc *benchCluster) record(ns string) (*admissions, error) {
	a := &admissions{
		jobCreated: map[string]time.Time{}, workloadJob: map[string]string{},
		quotaReserved: map[string]time.Time{}, admittedAt: map[string]time.Time{},
		requestWorkload: map[string]string{}, requestCreated: map[string]time.Time{},
		decidedAt: map[string]time.Time{}, requestFailed: map[string]bool{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	jobInf := informers.NewSharedInformerFactoryWithOptions(bc.client, 0, informers.WithNamespace(ns)).Batch().V1().Jobs().Informer()
	wlInf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(bc.dyn, 0, ns, nil).ForResource(kueue.Workloads).Informer()
	prInf := gantryinformers.NewSharedInformerFactoryWithOptions(bc.gantry, 0, gantryinformers.WithNamespace(ns)).
		AutoscalingX().V1().ProvisioningRequests().Informer()
	for _, w := range []struct {
		inf     cache.SharedIndexInformer
		observe func(obj any, added bool, at time.Time)
	}{{jobInf, a.observeJob}, {wlInf, a.observeWorkload}, {prInf, a.observeRequest}} {
		if err := watch(ctx, w.inf, w.observe); err != nil {
			cancel()
			return nil, err
		}
	}
	return a, nil
}

// watch calls observe, with the time it is called, for every object inf
// sees added or updated, once it has synced, until ctx ends: what
// benchutil.WatchPods does for pods, for any informer.
func watch(ctx context.Context, inf cache.SharedIndexInformer, observe func(obj any, added bool, at time.Time)) error {
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { observe(obj, true, time.Now()) },
		UpdateFunc: func(_, obj any) { observe(obj, false, time.Now()) },
	}); err != nil {
		return fmt.Errorf("watching: %w", err)
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("an informer did not sync")
	}
	return nil
}

func (a *admissions) stop() { a.cancel() }

// first records at under key in m unless m has it.
func first(m map[string]time.Time, key string, at time.Time) {
	if _, ok := m[key]; !ok {
		m[key] = at
	}
}

func ownerOf(refs []metav1.OwnerReference, kind string) string {
	for _, o := range refs {
		if o.Kind == kind {
			return o.Name
		}
	}
	return ""
}

func (a *admissions) observeJob(obj any, added bool, at time.Time) {
	j, ok := obj.(*batchv1.Job)
	if !ok || !added {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	first(a.jobCreated, j.Name, at)
}

func (a *admissions) observeWorkload(obj any, _ bool, at time.Time) {
	w, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.workloadJob[w.GetName()]; !ok {
		if job := ownerOf(w.GetOwnerReferences(), "Job"); job != "" {
			a.workloadJob[w.GetName()] = job
		}
	}
	if kueue.ConditionStatus(w, "QuotaReserved") == "True" {
		first(a.quotaReserved, w.GetName(), at)
	}
	if kueue.ConditionStatus(w, "Admitted") == "True" {
		first(a.admittedAt, w.GetName(), at)
	}
}

func (a *admissions) observeRequest(obj any, added bool, at time.Time) {
	pr, ok := obj.(*provv1.ProvisioningRequest)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if added {
		first(a.requestCreated, pr.Name, at)
	}
	if _, ok := a.requestWorkload[pr.Name]; !ok {
		if wl := ownerOf(pr.OwnerReferences, "Workload"); wl != "" {
			a.requestWorkload[pr.Name] = wl
		}
	}
	if _, ok := a.decidedAt[pr.Name]; ok {
		return
	}
	switch {
	case meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionFailed):
		a.decidedAt[pr.Name], a.requestFailed[pr.Name] = at, true
	case meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned):
		a.decidedAt[pr.Name] = at
	}
}

func (a *admissions) admitted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.admittedAt)
}

// result sums a run up, over the Jobs whose every step was seen. A
// Workload with several requests (Kueue retried a Failed one) counts from
// its first request's creation to its last decision.
func (a *admissions) result() admissionResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	type span struct{ created, decided time.Time }
	byWorkload := map[string]span{}
	for pr, wl := range a.requestWorkload {
		s := byWorkload[wl]
		if c, ok := a.requestCreated[pr]; ok && (s.created.IsZero() || c.Before(s.created)) {
			s.created = c
		}
		if d, ok := a.decidedAt[pr]; ok && d.After(s.decided) {
			s.decided = d
		}
		byWorkload[wl] = s
	}
	res := admissionResult{Admitted: len(a.admittedAt), RequestsRun: len(a.requestCreated), Failed: len(a.requestFailed)}
	var total, kueuePart, provPart, quota []time.Duration
	var firstJob, lastAdmitted time.Time
	for _, created := range a.jobCreated {
		if firstJob.IsZero() || created.Before(firstJob) {
			firstJob = created
		}
	}
	for wl, admitted := range a.admittedAt {
		if admitted.After(lastAdmitted) {
			lastAdmitted = admitted
		}
		created, ok := a.jobCreated[a.workloadJob[wl]]
		s := byWorkload[wl]
		if !ok || s.created.IsZero() || s.decided.IsZero() {
			continue
		}
		res.Timed++
		k := s.created.Sub(created) + admitted.Sub(s.decided)
		p := s.decided.Sub(s.created)
		total = append(total, admitted.Sub(created))
		kueuePart = append(kueuePart, k)
		provPart = append(provPart, p)
		if p > k {
			res.ProvisionerLarger++
		}
		if q, ok := a.quotaReserved[wl]; ok {
			quota = append(quota, q.Sub(created))
		}
	}
	res.Total, _ = benchutil.LatencyPercentiles(total)
	res.Kueue, _ = benchutil.LatencyPercentiles(kueuePart)
	res.Provisioner, _ = benchutil.LatencyPercentiles(provPart)
	res.QuotaReserved, _ = benchutil.LatencyPercentiles(quota)
	if window := lastAdmitted.Sub(firstJob); window > 0 {
		res.WindowS = window.Seconds()
		res.PerSecond = float64(res.Admitted) / window.Seconds()
	}
	return res
}
