//go:build scheduler_perf

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/ktesting"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/app"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestMain(m *testing.M) {
	// envtest (installing Gantry's CRDs) logs through controller-runtime;
	// without a logger it prints a warning with a stack trace to stderr,
	// which lands in the middle of a benchmark's result line.
	ctrllog.SetLogger(klog.Background())
	if err := perf.InitTests(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m.Run()
}

// BenchmarkPerfScheduling runs testdata/performance-config.yaml. Every
// workload gets a scheduler of its own, and with it a fresh extension layer.
func BenchmarkPerfScheduling(b *testing.B) {
	var current *frameworkext.Extender
	registry := frameworkruntime.Registry{}
	for name, factory := range app.Registry() {
		registry[name] = func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			return current.PluginFactoryProxy(name, factory)(ctx, obj, h)
		}
	}
	perf.RunBenchmarkPerfScheduling(b, "testdata/performance-config.yaml", "gantry", registry,
		perf.WithPreRunFn(func(ktesting.TContext, *perf.Workload) (func(), error) {
			current = frameworkext.New()
			return nil, nil
		}),
		perf.WithPrepareFn(func(tCtx ktesting.TContext) error {
			_, err := framework.InstallGantryCRDs(tCtx.RESTConfig())
			return err
		}),
		perf.WithNodeUpdateFn(func(tCtx ktesting.TContext, sched *scheduler.Scheduler, w *perf.Workload, _ *v1.NodeList) error {
			if err := attach(tCtx, current, sched, w.Name); err != nil {
				return err
			}
			watchCounters(tCtx, tCtx.Name())
			tracePods(tCtx, tCtx.Name())
			recordCPU(tCtx, tCtx.Name())
			return profileRest(tCtx, tCtx.Name())
		}),
	)
}

// profileRest, when $GANTRY_BENCH_PROFILE_DIR is set, profiles the process
// (scheduler, kube-apiserver and harness share it) from now, when the
// workload's nodes and reservations are in place, to the workload's end:
// <dir>/<workload>.cpu.pprof, and the allocations and the contended locks
// of the time meanwhile as pairs of profiles to compare,
// <workload>.{allocs,mutex}-{start,end}.pprof (go tool pprof
// -sample_index=alloc_space -diff_base start end). Setup work (creating
// nodes and reservations) is left out; it would drown what the scheduler
// does per pod.
func profileRest(tCtx ktesting.TContext, benchmark string) error {
	dir := os.Getenv("GANTRY_BENCH_PROFILE_DIR")
	if dir == "" {
		return nil
	}
	base := profileBase(dir, strings.TrimPrefix(benchmark, "BenchmarkPerfScheduling/"))
	// One in mutexSampling contention events is recorded, from the first
	// workload on.
	const mutexSampling = 10
	goruntime.SetMutexProfileFraction(mutexSampling)
	writeProfiles := func(suffix string) error {
		for _, name := range []string{"allocs", "mutex"} {
			f, err := os.Create(base + "." + name + "-" + suffix + ".pprof")
			if err != nil {
				return err
			}
			err = pprof.Lookup(name).WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := writeProfiles("start"); err != nil {
		return err
	}
	cpu, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return fmt.Errorf("starting the CPU profile (not with -test.cpuprofile): %w", err)
	}
	tCtx.Cleanup(func() {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			tCtx.Logf("writing %s: %v", cpu.Name(), err)
		}
		if err := writeProfiles("end"); err != nil {
			tCtx.Logf("writing the allocation and lock profiles: %v", err)
		}
	})
	return nil
}

// profileBase is where a workload's profiles go: <dir>/<workload>, with
// the slashes of its name made underscores. A workload's second and later
// runs (-test.count, or KEEP=1) are numbered: <workload>.2.cpu.pprof, ...
func profileBase(dir, workload string) string {
	base := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(workload))
	name := base
	for i := 2; ; i++ {
		if _, err := os.Stat(name + ".cpu.pprof"); err != nil {
			return name
		}
		name = fmt.Sprintf("%s.%d", base, i)
	}
}

var reservationsInName = regexp.MustCompile(`_(\d+)Reservations$`)

// attach runs the extension layer on the harness's scheduler, as Gantry's
// kube-scheduler does before it runs (here the scheduler already runs, but
// has no pods yet), and creates the workload's reservations.
func attach(tCtx ktesting.TContext, ext *frameworkext.Extender, sched *scheduler.Scheduler, workload string) error {
	if err := ext.Attach(sched); err != nil {
		return err
	}
	ext.StartInformers(tCtx)
	if err := ext.WaitForCacheSync(tCtx); err != nil {
		return err
	}
	ext.RunControllers(tCtx)
	m := reservationsInName.FindStringSubmatch(workload)
	if m == nil {
		return nil
	}
	n, _ := strconv.Atoi(m[1])
	return createReservations(tCtx, n)
}

// createReservations creates n reservations, each holding one pod's
// requests for app=owner pods of namespace "owners", and waits until the
// scheduler has made them all Available.
func createReservations(tCtx ktesting.TContext, n int) error {
	cfg := *tCtx.RESTConfig()
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	client, err := gantryclient.NewForConfig(&cfg)
	if err != nil {
		return err
	}
	rs := client.SchedulingV1alpha1().Reservations()
	for i := range n {
		r := wrappers.MakeReservation(fmt.Sprintf("bench-%d", i), "cpu", "100m", "memory", "500Mi").
			OwnerLabels("owners", map[string]string{"app": "owner"}).Obj()
		if _, err := rs.Create(tCtx, r, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating reservation %d: %w", i, err)
		}
	}
	var available int
	err = util.PollSlowly(tCtx, util.BenchmarkTimeout, fmt.Sprintf("%d reservations Available", n), func(ctx context.Context) (bool, error) {
		list, err := rs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		available = 0
		for _, r := range list.Items {
			if r.Status.Phase == schedv1alpha1.ReservationAvailable {
				available++
			}
		}
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
	owners := watchOwners(tCtx)
	tCtx.Cleanup(func() {
		ctx := context.Background()
		list, err := rs.List(ctx, metav1.ListOptions{})
		if err != nil {
			tCtx.Logf("listing reservations: %v", err)
			return
		}
		succeeded := 0
		for _, r := range list.Items {
			if r.Status.Phase == schedv1alpha1.ReservationSucceeded {
				succeeded++
			}
		}
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
		if err := recordConsumed(tCtx.Name(), n, seen, allocated, succeeded, latency, timed, unreserved, untimed); err != nil {
			tCtx.Logf("recording consumed reservations: %v", err)
		}
	})
	return nil
}

// ownerWatch counts the owner pods (namespace "owners") a workload made, and
// those bound with an allocation, from an informer: pods deleted after
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

func watchOwners(tCtx ktesting.TContext) *ownerWatch {
	w := &ownerWatch{seen: sets.New[types.UID](), allocated: sets.New[types.UID](), created: map[types.UID]time.Time{}}
	tCtx.Cleanup(watchPods(tCtx, "owners", func(p *v1.Pod) { w.observe(p, true) }))
	return w
}

// watchPods calls observe with every pod of namespace ("" for all) that a
// new informer sees added or updated, from once it has synced until the
// returned function stops it.
func watchPods(tCtx ktesting.TContext, namespace string, observe func(*v1.Pod)) (stop func()) {
	inf := informers.NewSharedInformerFactoryWithOptions(tCtx.Client(), 0, informers.WithNamespace(namespace)).Core().V1().Pods().Informer()
	handle := func(obj any) {
		if p, ok := obj.(*v1.Pod); ok {
			observe(p)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
	ctx, cancel := context.WithCancel(context.Background())
	go inf.Run(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	return cancel
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
// of the owners bound into a reservation (nearest rank), in milliseconds,
// and how many were timed; unreservedLatency the same for owners bound
// without one.
func (w *ownerWatch) latency() (pct map[string]float64, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return percentiles(w.latencies)
}

func (w *ownerWatch) unreservedLatency() (pct map[string]float64, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return percentiles(w.unreserved)
}

func percentiles(latencies []time.Duration) (pct map[string]float64, n int) {
	ls := slices.Clone(latencies)
	if len(ls) == 0 {
		return nil, 0
	}
	slices.Sort(ls)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(ls)))) - 1
		return float64(ls[max(i, 0)].Microseconds()) / 1000
	}
	return map[string]float64{"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1)}, len(ls)
}

func (w *ownerWatch) counts() (seen, allocated int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen.Len(), w.allocated.Len()
}

// recordConsumed appends, for hack/bench-scheduler.sh's report, how many
// owner pods a workload had, how many were bound into a reservation, how
// many reservations were Succeeded at its end, and the latency (over the
// timed owners) of the owners bound into a reservation and of those bound
// without one, to $ARTIFACTS/reservations.jsonl.
func recordConsumed(benchmark string, reservations, owners, allocated, succeeded int,
	latency map[string]float64, timed int, unreserved map[string]float64, untimed int) error {
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		return nil
	}
	line, err := json.Marshal(map[string]any{"benchmark": benchmark, "reservations": reservations,
		"ownerPods": owners, "ownersInReservations": allocated, "succeeded": succeeded,
		"ownerLatencyMs": latency, "ownersTimed": timed,
		"unreservedOwnerLatencyMs": unreserved, "unreservedOwnersTimed": untimed})
	if err != nil {
		return err
	}
	return appendLine(filepath.Join(dir, "reservations.jsonl"), line)
}

// appendLine appends line and a newline to the file at path.
func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
