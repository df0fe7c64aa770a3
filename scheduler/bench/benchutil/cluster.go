package benchutil

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// SetupUnthrottled is schedtest.Setup whose Env.Client and Env.Gantry,
// the benchmark's own (nodes, pods, reservations, polls), have no practical
// rate limit.
func SetupUnthrottled(tb testing.TB) *schedtest.Env {
	tb.Helper()
	e := schedtest.Setup(tb)
	fast := rest.CopyConfig(e.Config)
	fast.QPS, fast.Burst = 5000, 5000
	e.Client = kubernetes.NewForConfigOrDie(fast)
	e.Gantry = gantryclient.NewForConfigOrDie(fast)
	return e
}

// CreatePods creates pods with 16 concurrent calls of e.Client (the
// benchmark's own, unthrottled, client).
func CreatePods(tb testing.TB, e *schedtest.Env, pods []*v1.Pod) {
	tb.Helper()
	InParallel(tb, len(pods), 16, func(i int) error {
		_, err := e.Client.CoreV1().Pods(pods[i].Namespace).Create(context.Background(), pods[i], metav1.CreateOptions{})
		return err
	})
}

// Pod is a pod of namespace "default" that requests one CPU, labelled
// role=<class> and of priority class class ("" for none), that goes away
// at once when deleted (no kubelet runs).
func Pod(name, class string) *v1.Pod {
	return wrappers.MakePod(name, "default").Label("role", class).Requests("cpu", "1").
		PriorityClass(class).NoGrace().Obj()
}

// SchedulerLog is the file of $ARTIFACTS that QuietSchedulerLogs sends
// the logs to.
const SchedulerLog = "scheduler.log"

// QuietSchedulerLogs sends klog's output, and with it the logs of the
// schedulers a benchmark runs in this process, which would interleave with
// its result lines, to $ARTIFACTS/scheduler.log (or nowhere) until tb's
// cleanup: called before the benchmark sets up its cluster, it outlasts
// the schedulers that cluster's cleanup stops. Then klog writes its own
// text output to stderr again. Setting back what klog.Background()
// returned is no restore: once SetLogger has replaced a contextual logger,
// Background() is klogr, which logs through klog, and with klogr set klog
// calls itself until the stack overflows.
func QuietSchedulerLogs(tb testing.TB) {
	out := io.Discard
	var f *os.File
	if dir := Artifacts(); dir != "" {
		var err error
		if f, err = os.OpenFile(filepath.Join(dir, SchedulerLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
			tb.Fatal(err)
		}
		out = f
	}
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(out))))
	tb.Cleanup(func() {
		klog.ClearLogger()
		if f != nil {
			f.Close()
		}
	})
}
