//go:build scheduler_perf

package bench

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/component-base/logs/json/register"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/ktesting"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/scheduler/app"
	"github.com/gantry-dev/gantry/scheduler/frameworkext"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestMain(m *testing.M) {
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
			return attach(tCtx, current, sched, w.Name)
		}),
	)
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
	tCtx.Cleanup(func() {
		list, err := rs.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			tCtx.Logf("listing reservations: %v", err)
			return
		}
		consumed := 0
		for _, r := range list.Items {
			if r.Status.Phase == schedv1alpha1.ReservationSucceeded {
				consumed++
			}
		}
		tCtx.Logf("%d of %d reservations consumed by owner pods", consumed, n)
	})
	return nil
}
