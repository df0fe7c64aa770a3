//go:build scheduler_perf

package cost

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestMain(m *testing.M) { benchutil.Main(m) }

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
				benchutil.QuietSchedulerLogs(b)
				runReservationCost(b, n)
			})
		}
	})
}

func runReservationCost(b *testing.B, reservations int) {
	b.StopTimer()
	e := benchutil.SetupUnthrottled(b)
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
		if _, err := e.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, benchutil.OwnerReservation(i), metav1.CreateOptions{}); err != nil {
			b.Fatalf("creating reservation %d: %v", i, err)
		}
	}
	if err := util.PollSlowly(ctx, util.BenchmarkTimeout, "reservations Available", func(ctx context.Context) (bool, error) {
		list, err := e.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
		return err == nil && benchutil.CountPhase(list.Items, schedv1alpha1.ReservationAvailable) == reservations, err
	}); err != nil {
		b.Fatal(err)
	}

	var pods []*v1.Pod
	for i := range costPods {
		p := wrappers.MakePod(fmt.Sprintf("other-%d", i), "default").Requests("cpu", "100m", "memory", "500Mi").Obj()
		if i%2 == 0 {
			p.Namespace, p.Name, p.Labels = "owners", fmt.Sprintf("owner-%d", i), map[string]string{"app": "owner"}
		}
		pods = append(pods, p)
	}
	bound, err := benchutil.CountBoundPods(e.Client)
	if err != nil {
		b.Fatal(err)
	}
	defer bound.Stop()
	before := e.Faults.Counts()
	cpuBefore := benchutil.ProcessCPU()
	stopProfiles := profileCost(b, e)
	b.StartTimer()
	start := time.Now()
	benchutil.CreatePods(b, e, pods)
	util.Must(b).Until(ctx, util.BenchmarkTimeout, "pods bound", func(context.Context) bool {
		n, _ := bound.Counts()
		return n == costPods
	})
	elapsed := time.Since(start)
	b.StopTimer()
	stopProfiles()
	cpuAfter := benchutil.ProcessCPU()
	_, allocated := bound.Counts()
	b.ReportMetric(float64(costPods)/elapsed.Seconds(), "pods/s")
	for _, p := range []struct{ name, unit string }{
		{"", "scheduler-cpu-ms/pod"}, {"kube-apiserver", "apiserver-cpu-ms/pod"}, {"etcd", "etcd-cpu-ms/pod"},
	} {
		b.ReportMetric(float64((cpuAfter[p.name]-cpuBefore[p.name]).Microseconds())/1000/costPods, p.unit)
	}
	b.ReportMetric(float64(allocated), "owners-in-reservations")
	_, byResource := benchutil.CallsSince(before, e.Faults.Counts())
	b.ReportMetric(float64(byResource["PUT reservations/status"])/costPods, "status-writes/pod")
	b.Logf("the scheduler's API calls while measured, per pod: %s", benchutil.PerPod(byResource, costPods))
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
		return benchutil.CountPhase(final, schedv1alpha1.ReservationSucceeded) == want, nil
	}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(benchutil.StatusLag(final, start.Add(elapsed)).Seconds(), "status-lag-s")
}

// costProfileSeconds is how much of the measured part kube-apiserver's CPU
// profile covers: it has to be fixed when the profile is asked for, and the
// measured part has lasted 25-90 s on the machines it has run on. A
// shorter measured part leaves the rest of the profile to the status
// writes that come after it.
const costProfileSeconds = 60

// profileCost, when $GANTRY_BENCH_PROFILE_DIR is set, profiles the CPU of
// this process (scheduler and harness) from now until the returned function
// is called, and kube-apiserver's over the first costProfileSeconds from
// now (benchutil.Profiles), named after the benchmark. The returned
// function (also run at the benchmark's cleanup, at most once: a benchmark
// that fails while measured stops the profile too, so that the next one can
// start its own) waits for both.
func profileCost(b *testing.B, e *schedtest.Env) (stop func()) {
	stopProfiles, err := benchutil.StartProfiles(b.Name(), e.Client.CoreV1().RESTClient(),
		benchutil.Profiles{CPU: true, APIServerCPU: costProfileSeconds * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		if err := stopProfiles(); err != nil {
			b.Error(err)
		}
	})
	b.Cleanup(stop)
	return stop
}
