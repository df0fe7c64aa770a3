//go:build integration

package integration

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	gantryinformers "github.com/gantry-dev/gantry/crds/client/informers/externalversions"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// throughputRequests is how many requests BenchmarkCheckCapacityThroughput
// creates: enough that, at 100 decisions a second, the decisions span
// seconds rather than the first and last few.
var throughputRequests = flag.Int("throughput-requests", 500, "check-capacity requests of BenchmarkCheckCapacityThroughput")

// ThroughputFile is the file of $ARTIFACTS that
// BenchmarkCheckCapacityThroughput appends one line a run to
// (benchutil.AppendJSON); e2e/kueue/bench renders docs/performance-kueue.md
// from it.
const ThroughputFile = "provisioner-throughput.jsonl"

// throughputResult is one run of BenchmarkCheckCapacityThroughput, as
// recorded in ThroughputFile.
type throughputResult = benchutil.ProvisionerThroughput

// reconciles is the provisioner's reconciles; notPlaced its booked pods
// that the scheduler did not place.
func reconciles(b *testing.B) float64 { return counterSum(b, "controller_runtime_reconcile_total") }

func notPlaced(b *testing.B) float64 {
	return counterSum(b, "gantry_provisioning_booked_pods_not_placed_total")
}

// BenchmarkCheckCapacityThroughput: how many check-capacity requests the
// provisioner decides a second. -throughput-requests (500) requests of 10
// one-CPU pods are created at once, through an unthrottled client, on
// -throughput-nodes (500) nodes of 32 CPUs (room for all); Gantry's scheduler places the bookings
// with its client limits raised (QPS 5000), so that what is measured is
// the provisioner. It runs at the provisioner's default client limits
// (gantry-provisioner's --kube-api-qps and --kube-api-burst, app.NewOptions)
// and with them raised to 5000.
//
// A request's decision is timed from watch events, not from condition
// timestamps (one-second resolution): from the event that shows the
// provisioner's finalizer on it (Reconcile adds the finalizer before
// anything else, on the request's first reconcile: the first write of the
// provisioner's that a watch can see, so "first seen" is "taken off the
// work queue", not "arrived in the informer") to the event that shows it
// Provisioned=True or Failed=True. Requests/s is the decided requests over
// the window from the first request first seen to the last decision.
// Each run also records the provisioner's workers (-throughput-workers,
// default its own), the booked pods the scheduler did not place, and
// kube-apiserver's writes over the run by verb and resource. Run with:
//
//	go test -tags integration ./autoscaler/provisioning/integration -run '^$' -bench CheckCapacityThroughput -benchtime 1x
//
// With $GANTRY_BENCH_PROFILE_DIR set it profiles this process's CPU (the
// provisioner, the scheduler and the benchmark share it) and
// kube-apiserver's for 20 s, per sub-benchmark (benchutil.StartProfiles).
func BenchmarkCheckCapacityThroughput(b *testing.B) {
	defaults := app.NewOptions()
	for _, lim := range []struct {
		name  string
		qps   float32
		burst int
		// ownTemplates gives each request a PodTemplate of its own, created
		// just before it, as Kueue does (one per request and pod set).
		ownTemplates bool
	}{
		{"DefaultLimits", defaults.QPS, defaults.Burst, false},
		{"RaisedLimits", 5000, 5000, false},
		{"DefaultLimits/TemplatePerRequest", defaults.QPS, defaults.Burst, true},
		{"RaisedLimits/TemplatePerRequest", 5000, 5000, true},
	} {
		b.Run(lim.name, func(b *testing.B) {
			for range b.N {
				res := runThroughput(b, lim.qps, lim.burst, *throughputRequests, lim.ownTemplates)
				res.Limits = lim.name
				b.ReportMetric(res.PerSecond, "decisions/s")
				b.ReportMetric(res.ReconcilesPerRequest, "reconciles/request")
				b.ReportMetric(res.Decide["p50"], "decide-p50-ms")
				b.ReportMetric(res.Decide["p99"], "decide-p99-ms")
				b.ReportMetric(res.Created["p99"], "created-to-decided-p99-ms")
				b.ReportMetric(float64(res.Failed), "failed")
				b.ReportMetric(*res.NotPlaced, "booked-pods-not-placed")
				b.ReportMetric(res.WritesPerRequest, "api-writes/request")
				if err := benchutil.AppendJSON(ThroughputFile, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// throughputNodes is how many nodes of 32 CPUs BenchmarkCheckCapacityThroughput
// runs on.
var throughputNodes = flag.Int("throughput-nodes", 500, "nodes of BenchmarkCheckCapacityThroughput")

// throughputWorkers is the provisioner's --concurrent-provisioning-request-syncs
// in BenchmarkCheckCapacityThroughput (0: its default).
var throughputWorkers = flag.Int("throughput-workers", 0, "requests the provisioner reconciles at once in BenchmarkCheckCapacityThroughput (0: its default)")

// throughputPods is the pods of each request.
const throughputPods = 10

func runThroughput(b *testing.B, qps float32, burst, requests int, ownTemplates bool) throughputResult {
	b.StopTimer()
	e := newEnv(b)
	e.CreateNodes(*throughputNodes, "32")
	e.StartSchedulerQPS(schedtest.GantryProfile, 5000, 5000)
	e.startProvisioner(func(o *app.Options) {
		o.QPS, o.Burst = qps, burst
		if *throughputWorkers > 0 {
			o.Workers = *throughputWorkers
		}
	})
	e.template("default", "workers", "1")
	fast := rest.CopyConfig(e.Config)
	fast.QPS, fast.Burst = 5000, 5000
	gc := gantryclient.NewForConfigOrDie(fast)
	rec, err := recordDecisions(gc, "default")
	if err != nil {
		b.Fatal(err)
	}
	defer rec.stop()
	stopProfiles, err := benchutil.StartProfiles(b.Name(), e.Client.CoreV1().RESTClient(), benchutil.Profiles{CPU: true, APIServerCPU: 20 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	if stopProfiles != nil {
		b.Cleanup(func() { _ = stopProfiles() })
	}

	fastClient := kubernetes.NewForConfigOrDie(fast)
	reconcilesBefore, notPlacedBefore := reconciles(b), notPlaced(b)
	writesBefore := apiWrites(b, e.Client.CoreV1().RESTClient())
	b.StartTimer()
	benchutil.InParallel(b, requests, 16, func(i int) error {
		ctx := context.Background()
		name, tmpl := fmt.Sprintf("r-%04d", i), "workers"
		if ownTemplates {
			tmpl = "ppt-" + name
			pt := wrappers.MakePodTemplate(tmpl, "default").Requests("cpu", "1").Obj()
			if _, err := fastClient.CoreV1().PodTemplates("default").Create(ctx, pt, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		pr := wrappers.MakeProvisioningRequest(name, "default", provv1.ClassCheckCapacity).PodSet(tmpl, throughputPods).Obj()
		_, err := gc.AutoscalingXV1().ProvisioningRequests("default").Create(ctx, pr, metav1.CreateOptions{})
		return err
	})
	err = util.Poll(context.Background(), util.BenchmarkTimeout, "every request decided", func(context.Context) (bool, error) {
		n := rec.decided()
		return n == requests, fmt.Errorf("%d of %d requests decided", n, requests)
	})
	b.StopTimer()
	if stopProfiles != nil {
		if perr := stopProfiles(); perr != nil {
			b.Logf("profiles: %v", perr)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	res := rec.result()
	res.QPS, res.Burst, res.Nodes, res.Requests, res.Pods = qps, burst, *throughputNodes, requests, throughputPods
	res.ReconcilesPerRequest = (reconciles(b) - reconcilesBefore) / float64(requests)
	res.NotPlaced = ptr.To(notPlaced(b) - notPlacedBefore)
	res.Writes = writesSince(apiWrites(b, e.Client.CoreV1().RESTClient()), writesBefore)
	total := 0.0
	for _, n := range res.Writes {
		total += n
	}
	res.WritesPerRequest = total / float64(requests)
	res.Workers = cmp.Or(*throughputWorkers, app.NewOptions().Workers)
	b.Logf("%d requests of %d pods on %d nodes at client QPS %g burst %d, %d workers (a PodTemplate each: %t): %.1f decisions/s over %.2f s, %d failed, %g booked pods not placed, %.1f reconciles a request, %.1f API writes a request (%v); first seen → decided ms %v; created → decided ms %v; created → first seen ms %v",
		requests, throughputPods, *throughputNodes, qps, burst, res.Workers, ownTemplates, res.PerSecond, res.WindowS, res.Failed, *res.NotPlaced, res.ReconcilesPerRequest, res.WritesPerRequest, res.Writes, res.Decide, res.Created, res.Queued)
	return res
}

// decisions records, from an informer of the benchmark's own, when each
// request was seen created, first carried the provisioner's finalizer,
// and was first seen Provisioned=True or Failed=True.
type decisions struct {
	mu                          sync.Mutex
	added, firstSeen, decidedAt map[types.UID]time.Time
	failed                      map[types.UID]bool
	cancel                      context.CancelFunc
}

func recordDecisions(gc gantryclient.Interface, namespace string) (*decisions, error) {
	d := &decisions{added: map[types.UID]time.Time{}, firstSeen: map[types.UID]time.Time{},
		decidedAt: map[types.UID]time.Time{}, failed: map[types.UID]bool{}}
	inf := gantryinformers.NewSharedInformerFactoryWithOptions(gc, 0, gantryinformers.WithNamespace(namespace)).
		AutoscalingX().V1().ProvisioningRequests().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.observe(obj, true) },
		UpdateFunc: func(_, obj any) { d.observe(obj, false) },
	}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("the request informer did not sync")
	}
	return d, nil
}

func (d *decisions) observe(obj any, added bool) {
	now := time.Now()
	pr, ok := obj.(*provv1.ProvisioningRequest)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, seen := d.added[pr.UID]; !seen && added {
		d.added[pr.UID] = now
	}
	if _, seen := d.firstSeen[pr.UID]; !seen && controllerutil.ContainsFinalizer(pr, provisioning.Finalizer) {
		d.firstSeen[pr.UID] = now
	}
	if _, seen := d.decidedAt[pr.UID]; seen {
		return
	}
	switch {
	case meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionFailed):
		d.failed[pr.UID] = true
		d.decidedAt[pr.UID] = now
	case meta.IsStatusConditionTrue(pr.Status.Conditions, provv1.ConditionProvisioned):
		d.decidedAt[pr.UID] = now
	}
}

func (d *decisions) stop() { d.cancel() }

func (d *decisions) decided() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.decidedAt)
}

// result sums the decisions up.
func (d *decisions) result() throughputResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	var decide, created, queued []time.Duration
	var first, last time.Time
	res := throughputResult{Decided: len(d.decidedAt), Failed: len(d.failed)}
	for uid, at := range d.decidedAt {
		if last.IsZero() || at.After(last) {
			last = at
		}
		seen, ok := d.firstSeen[uid]
		if ok {
			decide = append(decide, at.Sub(seen))
			if first.IsZero() || seen.Before(first) {
				first = seen
			}
		}
		if add, ok := d.added[uid]; ok {
			created = append(created, at.Sub(add))
			if !seen.IsZero() {
				queued = append(queued, seen.Sub(add))
			}
		}
	}
	res.Decide, _ = benchutil.LatencyPercentiles(decide)
	res.Created, _ = benchutil.LatencyPercentiles(created)
	res.Queued, _ = benchutil.LatencyPercentiles(queued)
	if window := last.Sub(first); window > 0 {
		res.WindowS = window.Seconds()
		res.PerSecond = float64(res.Decided) / window.Seconds()
	}
	return res
}

// apiWrites is kube-apiserver's count of the writes it has served
// (apiserver_request_total of POST, PUT, PATCH and DELETE), by verb and
// resource[/subresource].
func apiWrites(b *testing.B, c rest.Interface) map[string]float64 {
	b.Helper()
	raw, err := c.Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading kube-apiserver's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatalf("parsing kube-apiserver's metrics: %v", err)
	}
	out := map[string]float64{}
	f := families["apiserver_request_total"]
	if f == nil {
		b.Fatal("kube-apiserver reports no apiserver_request_total")
	}
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE":
			key := l["verb"] + " " + l["resource"]
			if l["subresource"] != "" {
				key += "/" + l["subresource"]
			}
			out[key] += m.GetCounter().GetValue()
		}
	}
	return out
}

// writesSince is the writes from before to after, by verb and resource.
func writesSince(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
