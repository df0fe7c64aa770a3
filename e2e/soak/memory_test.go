//go:build soak

package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
	"github.com/gantry-dev/gantry/test/soak/invariants"
)

// The memory of the components over a run, for issue 40's Leak family: a
// component's heap after GC and its goroutines at the end of a run within
// Config.HeapRatio and Config.GoroutineRatio of their level after warm-up.
//
// Every component Gantry's local cluster runs is a Go binary whose
// /metrics comes from client_golang's Go collector with every runtime/metrics
// metric on: kube-apiserver, kube-scheduler and kube-controller-manager
// through k8s.io/component-base/metrics/legacyregistry (its init registers
// collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
// collectors.MetricsAll)) and the process collector), gantry-provisioner
// through controller-runtime's metrics registry (internal/controller/metrics
// registers the same two). So each exposes, as gauges:
//
//   - go_gc_heap_live_bytes, runtime/metrics /gc/heap/live:bytes: the heap
//     the last GC cycle marked live, that is the heap after GC. It is read
//     as it is; nothing is derived (go_memstats_next_gc_bytes, the heap goal,
//     also counts GOGC's share of stacks and globals since Go 1.18, and
//     would need GOGC).
//   - go_goroutines.
//   - process_start_time_seconds (process collector, from /proc): a
//     component killed and restarted starts a new lifetime, whose memory
//     starts over; each lifetime is judged on its own.
//
// A reading that lacks one of them is an error like a failed scrape.
const (
	heapAfterGCMetric  = "go_gc_heap_live_bytes"
	goroutinesMetric   = "go_goroutines"
	processStartMetric = "process_start_time_seconds"
)

// memoryMetrics are the metrics a reading takes.
var memoryMetrics = []string{heapAfterGCMetric, goroutinesMetric, processStartMetric}

// defaultMemoryEvery is how often sampleMemory reads a component unless
// told otherwise.
const defaultMemoryEvery = 15 * time.Second

// startTolerance is how far two readings' process start times may be apart
// and still be one lifetime: the process collector adds the start's clock
// ticks to the boot time of /proc/stat, which moves when the wall clock is
// stepped. Restarts are tens of seconds apart at least (a fault at most
// every half --soak-fault-interval).
const startTolerance = 2 * time.Second

// memReading is one reading of a component's metrics.
type memReading struct {
	At          time.Time
	Started     time.Time // its process's start
	HeapAfterGC uint64
	Goroutines  int
}

// memory holds the readings of the components sampleMemory reads.
type memory struct {
	every      time.Duration
	components []string
	wg         sync.WaitGroup

	mu        sync.Mutex
	readings  map[string][]memReading
	errors    map[string]int
	lastError map[string]string
}

func newMemory(every time.Duration, components []string) *memory {
	return &memory{every: every, components: slices.Clone(components),
		readings: map[string][]memReading{}, errors: map[string]int{}, lastError: map[string]string{}}
}

// sampleMemory reads the metrics of each component with read, at once and
// then every every (0: defaultMemoryEvery), until ctx ends; wait waits
// for it to stop. A read that fails or lacks a metric (a component being
// restarted) is counted for the report and is no failure: judgeMemory
// says which components could not be judged.
func sampleMemory(ctx context.Context, every time.Duration, read func(ctx context.Context, component string) ([]byte, error), components []string) *memory {
	if every <= 0 {
		every = defaultMemoryEvery
	}
	m := newMemory(every, components)
	for _, c := range m.components {
		m.wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for ctx.Err() == nil {
				// A scrape that hangs is given up at the next one.
				rctx, cancel := context.WithTimeout(ctx, every)
				at := time.Now()
				body, err := read(rctx, c)
				cancel()
				if ctx.Err() != nil {
					return // the run's end cut it short
				}
				m.add(c, at, body, err)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		})
	}
	return m
}

// wait waits until the sampler has stopped (after its ctx ended).
func (m *memory) wait() { m.wg.Wait() }

// add records what a read of component at at returned.
func (m *memory) add(component string, at time.Time, body []byte, err error) {
	var r memReading
	if err == nil {
		r, err = parseMemory(body)
		r.At = at
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.errors[component]++
		m.lastError[component] = err.Error()
		return
	}
	m.readings[component] = append(m.readings[component], r)
}

// componentMetrics reads a component's /metrics through the cluster's
// runtime (the local runtime: the metrics endpoint kwokctl's configuration
// gives each component, with the cluster's admin certificate). It is
// sampleMemory's read for a run on c. tokens are the bearer tokens of
// components whose /metrics authenticates tokens only, by component:
// gantry-provisioner's (controller-runtime's metrics server behind
// filters.WithAuthenticationAndAuthorization; a token of a ServiceAccount
// bound to the ClusterRole gantry-provisioner-metrics-reader).
func componentMetrics(c *cluster.Cluster, tokens map[string]string) func(ctx context.Context, component string) ([]byte, error) {
	return func(ctx context.Context, component string) ([]byte, error) {
		token, ok := tokens[component]
		if !ok {
			text, err := c.ComponentMetrics(ctx, component)
			return []byte(text), err
		}
		rt, ok := c.Runtime().(interface {
			ComponentRequestAs(ctx context.Context, component, token, method, path string, body []byte) (int, []byte, error)
		})
		if !ok {
			return nil, fmt.Errorf("the cluster's runtime cannot read %s's metrics with a token", component)
		}
		code, body, err := rt.ComponentRequestAs(ctx, component, token, http.MethodGet, "/metrics", nil)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("GET %s /metrics: %d %s", component, code, http.StatusText(code))
		}
		return body, nil
	}
}

// parseMemory reads the heap after GC, the goroutines and the process
// start of a Prometheus text exposition. Only the lines of those metrics
// are parsed (kube-apiserver's /metrics runs to megabytes of histograms).
func parseMemory(body []byte) (memReading, error) {
	var kept bytes.Buffer
	s := bufio.NewScanner(bytes.NewReader(body))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		if slices.Contains(memoryMetrics, lineMetric(s.Text())) {
			kept.Write(s.Bytes())
			kept.WriteByte('\n')
		}
	}
	if err := s.Err(); err != nil {
		return memReading{}, fmt.Errorf("reading metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return memReading{}, fmt.Errorf("parsing metrics %s: %w", strings.Join(memoryMetrics, ", "), err)
	}
	values := map[string]float64{}
	for _, name := range memoryMetrics {
		f, ok := families[name]
		if !ok {
			return memReading{}, fmt.Errorf("no %s in the metrics", name)
		}
		if n := len(f.GetMetric()); n != 1 {
			return memReading{}, fmt.Errorf("%s has %d series, want 1", name, n)
		}
		m := f.GetMetric()[0]
		var v float64
		switch {
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		default:
			return memReading{}, fmt.Errorf("%s is a %s, want a gauge", name, f.GetType())
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return memReading{}, fmt.Errorf("%s is %v", name, v)
		}
		values[name] = v
	}
	heap, goroutines, start := values[heapAfterGCMetric], values[goroutinesMetric], values[processStartMetric]
	switch {
	case heap >= 1<<53:
		return memReading{}, fmt.Errorf("%s is %v bytes, beyond any heap", heapAfterGCMetric, heap)
	case goroutines >= math.MaxInt32 || goroutines != math.Trunc(goroutines):
		return memReading{}, fmt.Errorf("%s is %v, not a count", goroutinesMetric, goroutines)
	case start <= 0 || start >= 1<<33:
		return memReading{}, fmt.Errorf("%s is %v, not a time in seconds since 1970", processStartMetric, start)
	}
	return memReading{
		// To the millisecond: the process collector counts clock ticks
		// (10 ms), and a float64 of seconds since 1970 holds no more.
		Started:     time.UnixMilli(int64(math.Round(start * 1000))).UTC(),
		HeapAfterGC: uint64(heap),
		Goroutines:  int(goroutines),
	}, nil
}

// lineMetric is the metric a line of the text exposition is about: a
// sample's name, or the name a HELP or TYPE comment gives.
func lineMetric(line string) string {
	line = strings.TrimLeft(line, " \t")
	if rest, ok := strings.CutPrefix(line, "#"); ok {
		f := strings.Fields(rest)
		if len(f) < 2 || (f[0] != "HELP" && f[0] != "TYPE") {
			return ""
		}
		return f[1]
	}
	if i := strings.IndexAny(line, "{ \t"); i >= 0 {
		return line[:i]
	}
	return line
}

// lifetime is the readings of one process of a component, in time order.
type lifetime struct {
	component string
	started   time.Time
	readings  []memReading
}

// name is how the checker and the report name the lifetime.
func (l lifetime) name() string {
	return fmt.Sprintf("%s (started %s)", l.component, l.started.UTC().Format(time.RFC3339))
}

// lifetimes are the component's readings split by process, oldest first:
// a reading whose process started more than startTolerance away from the
// one before starts a new lifetime.
func (m *memory) lifetimes(component string) []lifetime {
	m.mu.Lock()
	rs := slices.Clone(m.readings[component])
	m.mu.Unlock()
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].At.Before(rs[j].At) })
	var out []lifetime
	for _, r := range rs {
		if n := len(out); n > 0 {
			d := r.Started.Sub(out[n-1].readings[len(out[n-1].readings)-1].Started)
			if d.Abs() <= startTolerance {
				out[n-1].readings = append(out[n-1].readings, r)
				continue
			}
		}
		out = append(out, lifetime{component: component, started: r.Started, readings: []memReading{r}})
	}
	return out
}

// judgeMemory judges every lifetime of every component long enough to
// hold cfg's LeakWarmUp and two LeakWindows with c (whose Config cfg must
// be), and adds to the report its memory section, the Leak violations and
// checks, and a shortfall for each component none of whose lifetimes
// could be judged. Call it once, after the sampler stopped and after
// recorder.report.
func (rep *report) judgeMemory(m *memory, c *invariants.Checker, cfg invariants.Config) {
	mr := &memoryReport{
		Every: m.every, HeapMetric: heapAfterGCMetric, WarmUp: cfg.LeakWarmUp, Window: cfg.LeakWindow,
		HeapRatioLimit: cfg.HeapRatio, GoroutineRatioLimit: cfg.GoroutineRatio, Components: []componentMemory{},
	}
	need := cfg.LeakWarmUp + 2*cfg.LeakWindow
	for _, comp := range m.components {
		cm := componentMemory{Component: comp, Lifetimes: []lifetimeMemory{}}
		m.mu.Lock()
		cm.Readings, cm.ReadErrors, cm.LastReadError = len(m.readings[comp]), m.errors[comp], m.lastError[comp]
		m.mu.Unlock()
		for _, l := range m.lifetimes(comp) {
			first, last := l.readings[0].At, l.readings[len(l.readings)-1].At
			lm := lifetimeMemory{Started: l.started, From: first, To: last, Span: last.Sub(first)}
			for _, r := range l.readings {
				lm.Samples = append(lm.Samples, memSample{At: r.At, HeapAfterGC: r.HeapAfterGC, Goroutines: r.Goroutines})
			}
			if lm.Span < need {
				lm.NotJudged = fmt.Sprintf("read for %s, judging needs %s (a warm-up of %s and two windows of %s)",
					lm.Span.Round(time.Second), need, cfg.LeakWarmUp, cfg.LeakWindow)
				cm.Lifetimes = append(cm.Lifetimes, lm)
				continue
			}
			samples := make([]invariants.MemSample, 0, len(l.readings))
			for _, r := range l.readings {
				samples = append(samples, invariants.MemSample{Time: r.At, HeapAfterGC: r.HeapAfterGC, Goroutines: r.Goroutines})
			}
			vs, err := c.CheckLeaks(l.name(), samples)
			if err != nil {
				// Long enough, but the readings after warm-up were lost
				// (read errors).
				lm.NotJudged = err.Error()
				cm.Lifetimes = append(cm.Lifetimes, lm)
				continue
			}
			lm.Judged = true
			warm := first.Add(cfg.LeakWarmUp)
			b, e := memLevel(samples, warm, warm.Add(cfg.LeakWindow)), memLevel(samples, last.Add(-cfg.LeakWindow), last)
			lm.AfterWarmUp, lm.End = &b, &e
			lm.HeapRatio, lm.GoroutineRatio = ratio(float64(e.HeapAfterGC), float64(b.HeapAfterGC)), ratio(float64(e.Goroutines), float64(b.Goroutines))
			cm.Judged++
			cm.MaxHeapRatio, cm.MaxGoroutineRatio = max(cm.MaxHeapRatio, lm.HeapRatio), max(cm.MaxGoroutineRatio, lm.GoroutineRatio)
			for _, v := range vs {
				lm.Violations = append(lm.Violations, v.Invariant)
			}
			rep.Violations = append(rep.Violations, vs...)
			cm.Lifetimes = append(cm.Lifetimes, lm)
		}
		if cm.Judged == 0 {
			why := fmt.Sprintf("%d readings, %d lifetimes, none read for %s", cm.Readings, len(cm.Lifetimes), need)
			if cm.ReadErrors > 0 {
				why += fmt.Sprintf("; %d reads failed, the last: %s", cm.ReadErrors, cm.LastReadError)
			}
			rep.Shortfalls = append(rep.Shortfalls, fmt.Sprintf("memory of %s: no lifetime could be judged (%s)", comp, why))
		}
		mr.Components = append(mr.Components, cm)
	}
	rep.Memory = mr
	rep.Checks = c.Checks()
}

// memLevel is the level CheckLeaks took of the readings from from to to,
// for the report.
func memLevel(samples []invariants.MemSample, from, to time.Time) memoryLevel {
	l := invariants.MedianLevel(samples, from, to)
	return memoryLevel{From: l.From, To: l.To, Readings: l.Readings, HeapAfterGC: l.HeapAfterGC, Goroutines: l.Goroutines}
}

// ratio is end/base; 0 when base is 0 (JSON has no infinity).
func ratio(end, base float64) float64 {
	if base <= 0 {
		return 0
	}
	return end / base
}

// Unit tests of the sampler, the parser, lifetimes and the verdict wiring:
// none needs a cluster (`go test -tags soak ./e2e/soak/ -run
// 'Memory|Lifetimes'`; TestSoak alone runs the suite).

// exposition is a component's /metrics as client_golang writes it, with
// the metrics around the three read.
func exposition(started float64, heap uint64, goroutines int) []byte {
	return []byte(fmt.Sprintf(`# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 42
# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.1e-05
go_gc_duration_seconds{quantile="1"} 0.00123
go_gc_duration_seconds_sum 0.0456
go_gc_duration_seconds_count 117
# HELP go_gc_heap_goal_bytes Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.
# TYPE go_gc_heap_goal_bytes gauge
go_gc_heap_goal_bytes 9.9e+07
# HELP go_gc_heap_live_bytes Heap memory occupied by live objects that were marked by the previous GC. Sourced from /gc/heap/live:bytes.
# TYPE go_gc_heap_live_bytes gauge
go_gc_heap_live_bytes %d
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines %d
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds %s
# HELP rest_client_request_duration_seconds [ALPHA] Request latency in seconds.
# TYPE rest_client_request_duration_seconds histogram
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="GET",le="0.005"} 10
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="GET",le="+Inf"} 12
rest_client_request_duration_seconds_sum{host="127.0.0.1:6443",verb="GET"} 0.1
rest_client_request_duration_seconds_count{host="127.0.0.1:6443",verb="GET"} 12
`, heap, goroutines, strconvFloat(started)))
}

// strconvFloat writes v as client_golang does (shortest 'g' form).
func strconvFloat(v float64) string { return fmt.Sprint(v) }

func TestParseMemory(t *testing.T) {
	full := exposition(1.76446324457e+09, 52_428_800, 312)
	cases := map[string]struct {
		body    []byte
		want    memReading
		wantErr string
	}{
		"a component's metrics": {
			body: full,
			want: memReading{Started: time.Date(2025, 11, 30, 0, 40, 44, 570_000_000, time.UTC), HeapAfterGC: 52_428_800, Goroutines: 312},
		},
		"untyped, without comments": {
			body: []byte("go_gc_heap_live_bytes 1024\ngo_goroutines 7\nprocess_start_time_seconds 1.7e+09\n"),
			want: memReading{Started: time.Unix(1.7e9, 0).UTC(), HeapAfterGC: 1024, Goroutines: 7},
		},
		"no heap after GC (a Go collector without runtime metrics)": {
			body:    bytes.ReplaceAll(full, []byte("go_gc_heap_live_bytes"), []byte("go_memstats_heap_inuse_bytes")),
			wantErr: "no go_gc_heap_live_bytes in the metrics",
		},
		"no process start": {
			body:    []byte("go_gc_heap_live_bytes 1024\ngo_goroutines 7\n"),
			wantErr: "no process_start_time_seconds",
		},
		"an empty answer (a component starting)": {
			body:    nil,
			wantErr: "no go_gc_heap_live_bytes",
		},
		"a value that is no number": {
			body:    []byte("go_gc_heap_live_bytes lots\ngo_goroutines 7\nprocess_start_time_seconds 1.7e+09\n"),
			wantErr: "parsing metrics",
		},
		"a fraction of a goroutine": {
			body:    []byte("go_gc_heap_live_bytes 1024\ngo_goroutines 7.5\nprocess_start_time_seconds 1.7e+09\n"),
			wantErr: "go_goroutines is 7.5, not a count",
		},
		"a negative heap": {
			body:    []byte("go_gc_heap_live_bytes -1\ngo_goroutines 7\nprocess_start_time_seconds 1.7e+09\n"),
			wantErr: "go_gc_heap_live_bytes is -1",
		},
		"two series": {
			body:    []byte("go_gc_heap_live_bytes{a=\"1\"} 1\ngo_gc_heap_live_bytes{a=\"2\"} 2\ngo_goroutines 7\nprocess_start_time_seconds 1.7e+09\n"),
			wantErr: "go_gc_heap_live_bytes has 2 series, want 1",
		},
		"a counter": {
			body:    []byte("# TYPE go_goroutines counter\ngo_goroutines 7\ngo_gc_heap_live_bytes 1\nprocess_start_time_seconds 1.7e+09\n"),
			wantErr: "go_goroutines is a COUNTER, want a gauge",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseMemory(tc.body)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseMemory() error = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseMemory() (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseMemory(f *testing.F) {
	f.Add(exposition(1.76446324457e+09, 52_428_800, 312))
	f.Add([]byte("go_gc_heap_live_bytes 1e300\ngo_goroutines NaN\nprocess_start_time_seconds +Inf\n"))
	f.Add([]byte("# TYPE go_gc_heap_live_bytes histogram\ngo_gc_heap_live_bytes_bucket{le=\"1\"} 1\n"))
	f.Add([]byte("go_goroutines{a=\"\\\"}\"} 1\n#\n# HELP\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := parseMemory(body)
		if err != nil {
			return
		}
		if r.Goroutines < 0 || r.Started.Unix() <= 0 || r.HeapAfterGC >= 1<<53 {
			t.Errorf("parseMemory(%q) = %+v, a reading out of range", body, r)
		}
	})
}

func TestLineMetric(t *testing.T) {
	for line, want := range map[string]string{
		"go_goroutines 7":                           "go_goroutines",
		`go_goroutines{a="b"} 7`:                    "go_goroutines",
		"# HELP go_goroutines Number of goroutines": "go_goroutines",
		"# TYPE go_goroutines gauge":                "go_goroutines",
		"# a comment":                               "",
		"#":                                         "",
		"":                                          "",
	} {
		if got := lineMetric(line); got != want {
			t.Errorf("lineMetric(%q) = %q, want %q", line, got, want)
		}
	}
}

// t0 is when the test runs' readings start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// readEvery adds a reading of component every 15 s from from for d, of a
// process started at started, of heap MiB and goroutines as heap and g
// give for the time since from.
func readEvery(m *memory, component string, started, from time.Time, d time.Duration, heap func(time.Duration) uint64, g func(time.Duration) int) {
	for at := time.Duration(0); at <= d; at += 15 * time.Second {
		body := exposition(float64(started.UnixMilli())/1000, heap(at)<<20, g(at))
		m.add(component, from.Add(at), body, nil)
	}
}

func flat[T uint64 | int](v T) func(time.Duration) T { return func(time.Duration) T { return v } }

func TestMemoryLifetimes(t *testing.T) {
	m := newMemory(15*time.Second, []string{"kube-scheduler"})
	first, second := t0.Add(-time.Minute), t0.Add(10*time.Minute)
	readEvery(m, "kube-scheduler", first, t0, 9*time.Minute, flat[uint64](40), flat(200))
	// The start a reading shows moves by a second with the boot time
	// /proc/stat gives: the same process.
	m.add("kube-scheduler", t0.Add(9*time.Minute+30*time.Second), exposition(float64(first.Unix()+1), 40<<20, 200), nil)
	m.add("kube-scheduler", t0.Add(9*time.Minute+45*time.Second), nil, fmt.Errorf("connection refused"))
	readEvery(m, "kube-scheduler", second, second.Add(5*time.Second), 3*time.Minute, flat[uint64](30), flat(150))

	ls := m.lifetimes("kube-scheduler")
	if len(ls) != 2 {
		t.Fatalf("%d lifetimes, want 2: %+v", len(ls), ls)
	}
	if got, want := len(ls[0].readings), 9*4+1+1; got != want {
		t.Errorf("first lifetime has %d readings, want %d", got, want)
	}
	if !ls[0].started.Equal(first) || !ls[1].started.Equal(second) {
		t.Errorf("lifetimes started %s and %s, want %s and %s", ls[0].started, ls[1].started, first, second)
	}
	if got, want := ls[1].name(), "kube-scheduler (started 2026-03-01T12:10:00Z)"; got != want {
		t.Errorf("name = %q, want %q", got, want)
	}
	if m.errors["kube-scheduler"] != 1 || m.lastError["kube-scheduler"] != "connection refused" {
		t.Errorf("read errors %d (%q), want 1", m.errors["kube-scheduler"], m.lastError["kube-scheduler"])
	}
}

func TestJudgeMemory(t *testing.T) {
	cfg := invariants.DefaultConfig()
	cfg.LeakWarmUp, cfg.LeakWindow = 2*time.Minute, time.Minute
	c := invariants.NewChecker(cfg)
	components := []string{"kube-apiserver", "kube-scheduler", "gantry-provisioner"}
	m := newMemory(15*time.Second, components)
	// kube-apiserver: a flat lifetime of 6 minutes, killed, then one of 2
	// minutes: too short.
	readEvery(m, "kube-apiserver", t0, t0, 6*time.Minute, flat[uint64](100), flat(1000))
	readEvery(m, "kube-apiserver", t0.Add(7*time.Minute), t0.Add(7*time.Minute), 2*time.Minute, flat[uint64](90), flat(900))
	// kube-scheduler: its heap doubles and its goroutines grow by 5% over
	// 8 minutes.
	readEvery(m, "kube-scheduler", t0, t0, 8*time.Minute,
		func(d time.Duration) uint64 { return 40 + uint64(40*d/(8*time.Minute)) },
		func(d time.Duration) int { return 200 + int(10*d/(8*time.Minute)) })
	// gantry-provisioner: never read.
	for at := time.Duration(0); at < 8*time.Minute; at += 15 * time.Second {
		m.add("gantry-provisioner", t0.Add(at), nil, fmt.Errorf(`component "gantry-provisioner" has no metrics endpoint in kwokctl's configuration`))
	}

	rep := &report{Shape: "local", Checks: c.Checks()}
	rep.judgeMemory(m, c, cfg)

	mr := rep.Memory
	if mr == nil || len(mr.Components) != 3 {
		t.Fatalf("memory report: %+v", mr)
	}
	api, sched, prov := mr.Components[0], mr.Components[1], mr.Components[2]
	if api.Judged != 1 || len(api.Lifetimes) != 2 || !api.Lifetimes[0].Judged || api.Lifetimes[1].Judged {
		t.Errorf("kube-apiserver: %d of %d lifetimes judged, want the first of 2", api.Judged, len(api.Lifetimes))
	}
	if got := api.Lifetimes[1].NotJudged; !strings.Contains(got, "read for 2m0s, judging needs 4m0s") {
		t.Errorf("kube-apiserver's short lifetime: %q", got)
	}
	if api.MaxHeapRatio != 1 || api.MaxGoroutineRatio != 1 {
		t.Errorf("kube-apiserver's ratios %v, %v, want 1, 1", api.MaxHeapRatio, api.MaxGoroutineRatio)
	}
	l := sched.Lifetimes[0]
	if !l.Judged || l.AfterWarmUp == nil || l.End == nil {
		t.Fatalf("kube-scheduler's lifetime not judged: %+v", l)
	}
	// Window after warm-up: 2m to 3m (median 2m30s: 52.5 MiB, 203
	// goroutines); end: 7m to 8m (median 7m30s: 77.5 MiB, 209).
	if l.AfterWarmUp.Readings != 5 || l.AfterWarmUp.HeapAfterGC != 52<<20 || l.End.HeapAfterGC != 77<<20 {
		t.Errorf("levels %+v, %+v", *l.AfterWarmUp, *l.End)
	}
	if got := fmt.Sprintf("%.3f/%.3f", l.HeapRatio, l.GoroutineRatio); got != "1.481/1.030" {
		t.Errorf("kube-scheduler's ratios %s, want 1.481/1.030", got)
	}
	if len(l.Violations) != 0 {
		t.Errorf("kube-scheduler at 1.48x was judged to leak: %v", l.Violations)
	}
	if prov.Judged != 0 || prov.ReadErrors != 32 || len(prov.Lifetimes) != 0 {
		t.Errorf("gantry-provisioner: %+v", prov)
	}
	if len(rep.Shortfalls) != 1 || !strings.Contains(rep.Shortfalls[0], "memory of gantry-provisioner: no lifetime could be judged (0 readings, 0 lifetimes, none read for 4m0s; 32 reads failed, the last: component \"gantry-provisioner\" has no metrics endpoint") {
		t.Errorf("shortfalls %q", rep.Shortfalls)
	}
	if got := rep.Checks[invariants.FamilyLeak]; got != 4 {
		t.Errorf("%d Leak checks, want 4 (two invariants on two lifetimes)", got)
	}
	if len(rep.Violations) != 0 {
		t.Errorf("violations %v", rep.Violations)
	}

	text := rep.String()
	for _, want := range []string{
		"soak run of 0s on local from",
		"  kube-apiserver: 1 of 2 lifetimes judged, heap after GC at most 1.00x, goroutines at most 1.00x; not judged: 1 (read for 2m0s)\n",
		"  kube-scheduler: 1 of 1 lifetimes judged, heap after GC at most 1.48x, goroutines at most 1.03x\n",
		"  gantry-provisioner: 0 of 0 lifetimes judged; 32 of 32 reads failed, the last: component \"gantry-provisioner\" has no metrics endpoint",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text report lacks %q:\n%s", want, text)
		}
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"shape":"local"`, `"heapMetric":"go_gc_heap_live_bytes"`, `"warmUp":120000000000`, `"notJudged":"read for 2m0s`,
		`"afterWarmUp":{"from":"2026-03-01T12:02:00Z","to":"2026-03-01T12:03:00Z","readings":5,"heapAfterGC":54525952,"goroutines":203}`,
		`"samples":[{"at":"2026-03-01T12:00:00Z","heapAfterGC":104857600,"goroutines":1000}`, `"lifetimes":[]`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
}

// TestJudgeMemoryLeak: a lifetime past the heap limit is a Leak violation
// in the report, named after the lifetime; a later lifetime of the same
// component is judged on its own.
func TestJudgeMemoryLeak(t *testing.T) {
	cfg := invariants.DefaultConfig()
	cfg.LeakWarmUp, cfg.LeakWindow = 2*time.Minute, time.Minute
	c := invariants.NewChecker(cfg)
	m := newMemory(15*time.Second, []string{"kube-controller-manager"})
	readEvery(m, "kube-controller-manager", t0, t0, 6*time.Minute,
		func(d time.Duration) uint64 { return 30 + uint64(60*d/(6*time.Minute)) }, flat(300))
	later := t0.Add(7 * time.Minute)
	readEvery(m, "kube-controller-manager", later, later, 5*time.Minute, flat[uint64](35), func(d time.Duration) int { return 300 + int(100*d/(5*time.Minute)) })
	rep := &report{}
	rep.judgeMemory(m, c, cfg)
	cm := rep.Memory.Components[0]
	if cm.Judged != 2 {
		t.Fatalf("%d lifetimes judged, want 2", cm.Judged)
	}
	if got := cm.Lifetimes[0].Violations; !slices.Equal(got, []string{invariants.InvariantHeapGrowth}) {
		t.Errorf("first lifetime broke %v, want HeapGrowth", got)
	}
	if got := cm.Lifetimes[1].Violations; !slices.Equal(got, []string{invariants.InvariantGoroutineGrowth}) {
		t.Errorf("second lifetime broke %v, want GoroutineGrowth", got)
	}
	if len(rep.Violations) != 2 {
		t.Fatalf("violations %v, want 2", rep.Violations)
	}
	if v := rep.Violations[0]; v.Family != invariants.FamilyLeak || !strings.Contains(v.Message, "component kube-controller-manager (started 2026-03-01T12:00:00Z): heap after GC") {
		t.Errorf("violation %s", v)
	}
	// The report's ratios agree with the checker's verdict.
	if cm.Lifetimes[0].HeapRatio <= cfg.HeapRatio || cm.Lifetimes[1].GoroutineRatio <= cfg.GoroutineRatio || cm.Lifetimes[1].HeapRatio > cfg.HeapRatio {
		t.Errorf("ratios %+v", cm)
	}
}

func TestSampleMemory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	reads := map[string]int{}
	read := func(ctx context.Context, component string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		reads[component]++
		if component == "kube-apiserver" && reads[component]%2 == 0 {
			return nil, fmt.Errorf("being restarted")
		}
		return exposition(1.7e9, 1<<20, 10), nil
	}
	m := sampleMemory(ctx, 5*time.Millisecond, read, []string{"kube-apiserver", "kube-scheduler"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		n, e := len(m.readings["kube-scheduler"]), m.errors["kube-apiserver"]
		m.mu.Unlock()
		if n >= 3 && e >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d readings of kube-scheduler, %d read errors of kube-apiserver", n, e)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	m.wait()
	mu.Lock()
	n := reads["kube-scheduler"]
	mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if reads["kube-scheduler"] != n {
		t.Errorf("reads went on after the sampler stopped")
	}
	if m.every != 5*time.Millisecond || sampleMemory(ctx, 0, read, nil).every != defaultMemoryEvery {
		t.Errorf("every not kept or defaulted")
	}
}
