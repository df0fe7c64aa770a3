//go:build scheduler_perf

package perf

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/component-base/logs/json/register"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"

	"github.com/gantry-dev/gantry/scheduler/app"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/test/integration/framework"
)

func TestMain(m *testing.M) { benchutil.Main(m) }

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
			benchutil.WatchCounters(tCtx, tCtx.Client(), tCtx.Name())
			benchutil.TracePods(tCtx, tCtx.Client(), tCtx.Name())
			benchutil.RecordCPU(tCtx, tCtx.Name())
			return profileRest(tCtx)
		}),
	)
}

// profileRest, when $GANTRY_BENCH_PROFILE_DIR is set, profiles the process
// (scheduler, kube-apiserver and harness share it) from now, when the
// workload's nodes and reservations are in place, to the workload's end:
// its CPU, and its allocations and contended locks as pairs of profiles
// to compare (benchutil.Profiles), named after the workload. Setup work
// (creating nodes and reservations) is left out; it would drown what the
// scheduler does per pod.
func profileRest(tCtx ktesting.TContext) error {
	stop, err := benchutil.StartProfiles(strings.TrimPrefix(tCtx.Name(), "BenchmarkPerfScheduling/"), nil,
		benchutil.Profiles{CPU: true, AllocsAndMutex: true})
	if err != nil {
		return err
	}
	tCtx.Cleanup(func() {
		if err := stop(); err != nil {
			tCtx.Logf("%v", err)
		}
	})
	return nil
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
