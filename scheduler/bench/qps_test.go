//go:build scheduler_perf

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
)

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
	// The schedulers' logs would interleave with the benchmark's result
	// lines: they go to $ARTIFACTS/preemption-qps.log, or nowhere.
	out := io.Discard
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		f, err := os.Create(filepath.Join(dir, "preemption-qps.log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		out = f
	}
	prev := klog.Background()
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(out))))
	defer klog.SetLogger(prev)
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
					runPreemptionQPS(b, prof.plugins, limits.qps, limits.burst)
				}
			})
		}
	}
}

func runPreemptionQPS(b *testing.B, profile string, qps float32, burst int32) {
	b.StopTimer()
	e := schedtest.Setup(b)
	// The test's own calls (nodes, pods, polls) are not what is measured:
	// they get a client without practical limits.
	fast := rest.CopyConfig(e.Config)
	fast.QPS, fast.Burst = 5000, 5000
	e.Client = kubernetes.NewForConfigOrDie(fast)
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
			p := benchPod(fmt.Sprintf("low-%d-%d", n, i), "low")
			p.Spec.NodeName = fmt.Sprintf("node-%d", n)
			low = append(low, p)
		}
	}
	createAll(b, e, low)
	s := e.StartSchedulerQPS(profile, qps, burst)
	// The scheduler starts measuring once its cache holds every bound pod.
	util.Must(b).Until(ctx, util.LongTimeout, "scheduler cache filled", func(context.Context) bool {
		n, err := s.Sched.Cache.PodCount()
		return err == nil && n == len(low)
	})

	var high []*v1.Pod
	for i := range qpsPreemptors {
		high = append(high, benchPod(fmt.Sprintf("high-%d", i), "high"))
	}
	b.StartTimer()
	start := time.Now()
	createAll(b, e, high)
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
		return bound == qpsPreemptors
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(qpsPreemptors)/elapsed.Seconds(), "pods/s")
	per := func(method, part string) float64 {
		return float64(e.Faults.CountMatching(method, part)) / qpsPreemptors
	}
	b.ReportMetric(per(http.MethodDelete, "/pods/low-"), "victim-deletes/pod")
	b.ReportMetric(per(http.MethodPatch, "/pods/"), "pod-patches/pod")
	b.ReportMetric(per(http.MethodPost, "/binding"), "binds/pod")
	s.Stop()
}

func benchPod(name, class string) *v1.Pod {
	p := st.MakePod().Namespace("default").Name(name).Label("role", class).
		Req(map[v1.ResourceName]string{v1.ResourceCPU: "1"}).Obj()
	p.Spec.PriorityClassName = class
	p.Spec.TerminationGracePeriodSeconds = new(int64) // no kubelet: deleted at once
	return p
}

// createAll creates pods with 16 concurrent calls of the test's own
// (unthrottled) client.
func createAll(b *testing.B, e *schedtest.Env, pods []*v1.Pod) {
	b.Helper()
	work := make(chan *v1.Pod)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for p := range work {
				if _, err := e.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
