//go:build scheduler_perf

package qps

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestMain(m *testing.M) { benchutil.Main(m) }

// Preemption throughput under the scheduler's own client rate limits.
// scheduler_perf gives its scheduler a client of QPS 5000 and no way to
// change it, so this benchmark runs the real kube-scheduler command
// (schedtest: its configuration file, clientConnection qps/burst honoured)
// against etcd and kube-apiserver from _output/bin. Nodes are full of
// low-priority pods; every measured pod has high priority and must preempt
// one of them. pods/s is measured pods bound per second from the first
// one's creation; the API calls the scheduler made (counted by the proxy it
// talks through) are reported per measured pod.
const (
	qpsNodes      = 500
	qpsCPUPerNode = 4
	qpsPreemptors = 500
)

// upstreamProfile is upstream's default profile: DefaultPreemption,
// asynchronous (on by default).
const upstreamProfile = ""

func BenchmarkPreemptionClientQPS(b *testing.B) {
	benchutil.QuietSchedulerLogs(b)
	for _, prof := range []struct{ name, plugins string }{
		{"UpstreamPreemption", upstreamProfile},
		{"GantryPreemption", schedtest.GantryProfile},
	} {
		for _, limits := range []struct {
			name  string
			qps   float32
			burst int32
		}{
			{"QPS5000", 5000, 5000}, // scheduler_perf's
			{"QPS50", 50, 100},      // kube-scheduler's defaults
		} {
			b.Run(prof.name+"/"+limits.name, func(b *testing.B) {
				for range b.N {
					runPreemptionQPS(b, prof.plugins, limits.qps, limits.burst, qpsPreemptors, 0)
				}
			})
		}
	}
}

const (
	// victimDeleteFault is how long victim deletes fail in
	// BenchmarkPreemptionVictimDeleteFaults.
	victimDeleteFault = 10 * time.Second
	// faultPreemptors: few enough that at QPS 50 their API calls (about
	// five each) take a few seconds, so that what is timed is the fault
	// and the recovery from it, not the client's rate limiter.
	faultPreemptors = 50
)

// BenchmarkPreemptionVictimDeleteFaults is BenchmarkPreemptionClientQPS's
// shape at kube-scheduler's client limits, with every victim delete failing
// (503) for the first 10s after the preemptors are created. For each
// preemptor it measures, at the proxy, the time from its first attempt (its
// first status patch: the scheduler nominates it or records why it waits)
// to its binding, and reports the p50 and p99, and the p99 of what that
// time exceeds the preemptor's backoff by. The backoff is the least a
// preemptor that failed throughout the fault must have waited: the
// cumulative exponential schedule (1s, 2s, 4s, 8s, then 10s each) up to
// its first retry after the fault ends.
func BenchmarkPreemptionVictimDeleteFaults(b *testing.B) {
	benchutil.QuietSchedulerLogs(b)
	for _, prof := range []struct{ name, plugins string }{
		{"UpstreamPreemption", upstreamProfile},
		{"GantryPreemption", schedtest.GantryProfile},
	} {
		b.Run(prof.name+"/QPS50_DeleteFault10s", func(b *testing.B) {
			for range b.N {
				runPreemptionQPS(b, prof.plugins, 50, 100, faultPreemptors, victimDeleteFault)
			}
		})
	}
}

func runPreemptionQPS(b *testing.B, profile string, qps float32, burst int32, preemptors int, fault time.Duration) {
	b.StopTimer()
	e := benchutil.SetupUnthrottled(b)
	ctx := context.Background()
	for name, value := range map[string]int32{"low": 1, "high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	e.CreateNodes(qpsNodes, fmt.Sprint(qpsCPUPerNode))
	var low []*v1.Pod
	for n := range qpsNodes {
		for i := range qpsCPUPerNode {
			p := benchutil.Pod(fmt.Sprintf("low-%d-%d", n, i), "low")
			p.Spec.NodeName = fmt.Sprintf("node-%d", n)
			low = append(low, p)
		}
	}
	benchutil.CreatePods(b, e, low)
	s := e.StartSchedulerQPS(profile, qps, burst)
	// The scheduler starts measuring once its cache holds every bound pod
	// and it is scheduling: a pod that requests nothing (it fits beside
	// the full nodes' pods) is bound, then removed. A scheduler whose cache
	// has filled may still be starting (Gantry's waits for its own
	// informers first), and its start-up is not preemption time.
	util.Must(b).Until(ctx, util.LongTimeout, "scheduler cache filled", func(context.Context) bool {
		n, err := s.Sched.Cache.PodCount()
		return err == nil && n == len(low)
	})
	warm := wrappers.MakePod("warm-up", "default").Obj()
	if _, err := e.Client.CoreV1().Pods("default").Create(ctx, warm, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	util.Must(b).Until(ctx, util.LongTimeout, "scheduler scheduling", func(ctx context.Context) bool {
		p, err := e.Client.CoreV1().Pods("default").Get(ctx, warm.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != ""
	})
	zero := int64(0)
	if err := e.Client.CoreV1().Pods("default").Delete(ctx, warm.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		b.Fatal(err)
	}

	var high []*v1.Pod
	for i := range preemptors {
		high = append(high, benchutil.Pod(fmt.Sprintf("high-%d", i), "high"))
	}
	before := e.Faults.Counts()
	countersBefore, err := benchutil.ReadCounters()
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	faultEnd := start
	if fault > 0 {
		e.Faults.Fail(http.MethodDelete, "/pods/low-", http.StatusServiceUnavailable)
		faultEnd = start.Add(fault)
		stop := time.AfterFunc(fault, e.Faults.Clear)
		defer stop.Stop()
	}
	benchutil.CreatePods(b, e, high)
	util.Must(b).Until(ctx, util.BenchmarkTimeout, "preemptors bound", func(ctx context.Context) bool {
		list, err := e.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "role=high"})
		if err != nil {
			return false
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == preemptors
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(preemptors)/elapsed.Seconds(), "pods/s")
	after := e.Faults.Counts()
	// per is the calls of method to paths containing part while measured,
	// per preemptor.
	per := func(method, part string) float64 {
		n := 0
		for k, c := range after {
			if m, path, _ := strings.Cut(k, " "); m == method && strings.Contains(path, part) {
				n += c - before[k]
			}
		}
		return float64(n) / float64(preemptors)
	}
	b.ReportMetric(per(http.MethodDelete, "/pods/low-"), "victim-deletes/pod")
	b.ReportMetric(per(http.MethodPatch, "/pods/"), "pod-patches/pod")
	b.ReportMetric(per(http.MethodPost, "/binding"), "binds/pod")
	total, byResource := benchutil.CallsSince(before, after)
	b.ReportMetric(float64(total)/float64(preemptors), "api-calls/pod")
	b.Logf("API calls while measured, per preemptor: %s", benchutil.PerPod(byResource, preemptors))
	countersAfter, err := benchutil.ReadCounters()
	if err != nil {
		b.Fatal(err)
	}
	// Attempts that ended unschedulable: one per preemptor when each
	// preempts at its first attempt and is scheduled at its next.
	unschedulable := 0.0
	for k, v := range countersAfter {
		if strings.HasPrefix(k, "scheduler_schedule_attempts_total{") && strings.Contains(k, "result=unschedulable") {
			unschedulable += v - countersBefore[k]
		}
	}
	b.ReportMetric(unschedulable/float64(preemptors), "unschedulable-attempts/pod")
	if fault > 0 {
		reportFaultLatency(b, e, preemptors, start, faultEnd)
	}
	s.Stop()
}

// reportFaultLatency reports, over the preemptors, the p50 and p99 of the
// time from first attempt to binding, and the p99 of its excess over the
// backoff (backoffBefore).
func reportFaultLatency(b *testing.B, e *schedtest.Env, preemptors int, created, faultEnd time.Time) {
	var took, excess []float64
	for i := range preemptors {
		path := fmt.Sprintf("/api/v1/namespaces/default/pods/high-%d", i)
		bound, ok := e.Faults.First(http.MethodPost, path+"/binding")
		if !ok {
			b.Fatalf("preemptor high-%d is bound but its binding never went through the proxy", i)
		}
		// A preemptor the scheduler never patched was bound at its first
		// attempt, which came after its creation.
		first, ok := e.Faults.First(http.MethodPatch, path+"/status")
		if !ok || first.After(bound) {
			first = created
		}
		d := bound.Sub(first)
		took = append(took, d.Seconds())
		excess = append(excess, (d - backoffBefore(first, faultEnd)).Seconds())
	}
	tookPct := benchutil.Percentiles(took, 0.50, 0.99)
	b.ReportMetric(tookPct[0], "s-to-bind-p50")
	b.ReportMetric(tookPct[1], "s-to-bind-p99")
	b.ReportMetric(benchutil.Percentiles(excess, 0.99)[0], "s-over-backoff-p99")
}
