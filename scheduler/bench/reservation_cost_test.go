//go:build scheduler_perf

package bench

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// What reservations cost each process, as on a production control plane.
// scheduler_perf runs kube-apiserver and the scheduler in one process: they
// share its CPUs, its heap and its garbage collector, so the scheduler's
// figures there include what kube-apiserver spends on the Reservation CRD.
// This benchmark runs Gantry's kube-scheduler in this process (schedtest,
// client QPS 5000 as in scheduler_perf) against etcd and kube-apiserver
// from _output/bin, each in its own process, and reports besides pods/s the
// CPU time each process spent per measured pod ("scheduler": this process,
// the harness included), the reservation status writes the scheduler made
// while measured, and how long after the last binding the last consumed
// reservation showed Succeeded (status-lag-s). The workload is SchedulingBasic's shape at 5000
// nodes with 10,000 pods created at once, half of them owners (namespace
// "owners", app=owner), with no reservations and with 3000 Available ones
// each holding one owner's requests. The harness's own work in this
// process (creating the pods, watching them, the proxy the scheduler talks
// through) is the same with and without reservations, but for the proxy's
// share of the status writes.
const (
	costNodes = 5000
	costPods  = 10000
)

// BenchmarkReservationCost's names follow BenchmarkPerfScheduling's
// (suite/test case/workload), which perfreport reads.
func BenchmarkReservationCost(b *testing.B) {
	b.Run("Gantry", func(b *testing.B) {
		for _, n := range []int{0, 3000} {
			name := fmt.Sprintf("%dNodes_%dPods", costNodes, costPods)
			if n > 0 {
				name += fmt.Sprintf("_%dReservations", n)
			}
			b.Run(name, func(b *testing.B) {
				quietSchedulerLogs(b)
				runReservationCost(b, n)
			})
		}
	})
}

func runReservationCost(b *testing.B, reservations int) {
	b.StopTimer()
	e := setupUnthrottled(b)
	ctx := context.Background()
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "owners"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	e.CreateNodes(costNodes, "4")
	s := e.StartSchedulerQPS(schedtest.GantryProfile, 5000, 5000)
	util.Must(b).Until(ctx, util.LongTimeout, "scheduler cache filled", func(context.Context) bool {
		return s.Sched.Cache.NodeCount() == costNodes
	})
	for i := range reservations {
		r := wrappers.MakeReservation(fmt.Sprintf("bench-%d", i), "cpu", "100m", "memory", "500Mi").
			OwnerLabels("owners", map[string]string{"app": "owner"}).Obj()
		if _, err := e.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			b.Fatalf("creating reservation %d: %v", i, err)
		}
	}
	if err := util.PollSlowly(ctx, util.BenchmarkTimeout, "reservations Available", func(ctx context.Context) (bool, error) {
		list, err := e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
		return err == nil && countPhase(list.Items, schedv1alpha1.ReservationAvailable) == reservations, err
	}); err != nil {
		b.Fatal(err)
	}

	var pods []*v1.Pod
	for i := range costPods {
		p := st.MakePod().Namespace("default").Name(fmt.Sprintf("other-%d", i)).
			Req(map[v1.ResourceName]string{v1.ResourceCPU: "100m", v1.ResourceMemory: "500Mi"}).Obj()
		if i%2 == 0 {
			p.Namespace, p.Name, p.Labels = "owners", fmt.Sprintf("owner-%d", i), map[string]string{"app": "owner"}
		}
		pods = append(pods, p)
	}
	bound := newBoundWatch(b, e.Client)
	defer bound.stop()
	before := e.Faults.Counts()
	cpuBefore := processCPU()
	stopProfiles := profileCost(b, e)
	b.StartTimer()
	start := time.Now()
	createAll(b, e, pods)
	util.Must(b).Until(ctx, util.BenchmarkTimeout, "pods bound", func(context.Context) bool {
		n, _ := bound.counts()
		return n == costPods
	})
	elapsed := time.Since(start)
	b.StopTimer()
	stopProfiles()
	cpuAfter := processCPU()
	_, allocated := bound.counts()
	b.ReportMetric(float64(costPods)/elapsed.Seconds(), "pods/s")
	for _, p := range []struct{ name, unit string }{
		{"", "scheduler-cpu-ms/pod"}, {"kube-apiserver", "apiserver-cpu-ms/pod"}, {"etcd", "etcd-cpu-ms/pod"},
	} {
		b.ReportMetric(float64((cpuAfter[p.name]-cpuBefore[p.name]).Microseconds())/1000/costPods, p.unit)
	}
	b.ReportMetric(float64(allocated), "owners-in-reservations")
	_, byResource := callsSince(before, e.Faults.Counts())
	b.ReportMetric(float64(byResource["PUT reservations/status"])/costPods, "status-writes/pod")
	b.Logf("the scheduler's API calls while measured, per pod: %s", perPod(byResource, costPods))
	want := min(reservations, costPods/2)
	if allocated != want {
		b.Fatalf("%d owners bound into reservations, want %d", allocated, want)
	}
	if want == 0 {
		return
	}
	// How long after the last pod was bound the status controller took to
	// record the last consumption (Succeeded): the status writes it had not
	// made by then are left out of the CPU figures. It is read from the
	// reservations' Ready condition, which the controller stamps when it
	// writes Succeeded, not from when this poll sees them: stopProfiles has
	// waited for kube-apiserver's profile, which outlasts the workload.
	var final []schedv1alpha1.Reservation
	if err := util.PollSlowly(ctx, util.BenchmarkTimeout, "consumed reservations Succeeded", func(ctx context.Context) (bool, error) {
		list, err := e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		final = list.Items
		return countPhase(final, schedv1alpha1.ReservationSucceeded) == want, nil
	}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(statusLag(final, start.Add(elapsed)).Seconds(), "status-lag-s")
}

// costProfileSeconds is how much of the measured part kube-apiserver's CPU
// profile covers: it has to be fixed when the profile is asked for, and the
// measured part has lasted 25-90 s on the machines it has run on. A
// shorter measured part leaves the rest of the profile to the status
// writes that come after it.
const costProfileSeconds = 60

// profileCost, when $GANTRY_BENCH_PROFILE_DIR is set, profiles the CPU of
// this process (scheduler and harness) from now until the returned function
// is called, into <dir>/<benchmark>.cpu.pprof, and kube-apiserver's over the
// first costProfileSeconds from now (its /debug/pprof/profile), into
// <dir>/<benchmark>.apiserver.cpu.pprof. The returned function (also run
// at the benchmark's cleanup, at most once) waits for both.
func profileCost(b *testing.B, e *schedtest.Env) (stop func()) {
	dir := os.Getenv("GANTRY_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	base := profileBase(dir, b.Name())
	cpu, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		b.Fatalf("starting the CPU profile (not with -test.cpuprofile): %v", err)
	}
	apiserver := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*costProfileSeconds*time.Second)
		defer cancel()
		raw, err := e.Client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(costProfileSeconds)).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(base+".apiserver.cpu.pprof", raw, 0o644)
		}
		apiserver <- err
	}()
	// A benchmark that fails while measured stops the profile too, so that
	// the next one can start its own.
	stop = sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			b.Errorf("writing %s: %v", cpu.Name(), err)
		}
		if err := <-apiserver; err != nil {
			b.Errorf("kube-apiserver's CPU profile: %v", err)
		}
	})
	b.Cleanup(stop)
	return stop
}

// boundWatch counts, through a pod informer of its own, the pods bound and
// those bound into a reservation.
type boundWatch struct {
	mu        sync.Mutex
	bound     map[types.UID]bool // true: bound into a reservation
	allocated int
	stop      context.CancelFunc
}

func newBoundWatch(b *testing.B, client kubernetes.Interface) *boundWatch {
	w := &boundWatch{bound: map[types.UID]bool{}}
	inf := informers.NewSharedInformerFactory(client, 0).Core().V1().Pods().Informer()
	observe := func(obj any) {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Spec.NodeName == "" {
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
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("pod informer did not sync")
	}
	return w
}

func (w *boundWatch) counts() (bound, allocated int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bound), w.allocated
}
