//go:build soak

package soak

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/test/soak/invariants"
)

// recorder keeps what a run did, for its report; tenants and the fault
// loop write to it from their goroutines.
type recorder struct {
	mu     sync.Mutex
	ops    map[string]map[string]int // kind → result (or "failed") → count
	errors map[string][]string       // kind → the first errors
	faults []fault
	// apiserverKilled is when the fault loop last killed kube-apiserver
	// and apiserverReady when it was ready again (zero while it is not).
	apiserverKilled, apiserverReady time.Time
}

// outageSlack is how long after kube-apiserver was ready again an error
// still counts as its outage's: an operation that failed then may have
// sent its request before.
const outageSlack = 5 * time.Second

func (r *recorder) apiserverDown(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apiserverKilled, r.apiserverReady = at, time.Time{}
}

func (r *recorder) apiserverUp(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apiserverReady = at
}

// inOutage reports whether at is within kube-apiserver's last outage: from
// its kill to outageSlack after it was ready again.
func (r *recorder) inOutage(at time.Time) bool {
	if r.apiserverKilled.IsZero() || at.Before(r.apiserverKilled) {
		return false
	}
	return r.apiserverReady.IsZero() || at.Before(r.apiserverReady.Add(outageSlack))
}

// fault is one injected fault.
type fault struct {
	Kind      string        `json:"kind"`
	Component string        `json:"component"`
	At        time.Time     `json:"at"`
	Took      time.Duration `json:"took"`
	// Injected is how many requests an API fault failed or delayed.
	Injected int    `json:"injected,omitempty"`
	Error    string `json:"error,omitempty"`
}

// keptErrors is how many errors of a kind the report keeps.
const keptErrors = 10

func newRecorder() *recorder {
	return &recorder{ops: map[string]map[string]int{}, errors: map[string][]string{}}
}

// How an operation ended when it failed: resultFailedOutage when its error
// is one of a kube-apiserver that is down or restarting (the run kills it),
// or came while it was not ready again after a kill,
// resultRefusedWebhook when admission refused it for gantry-webhook's sake,
// resultFailed otherwise, which fails the run.
const (
	resultFailed       = "failed"
	resultFailedOutage = "failed while kube-apiserver was unavailable"
)

func (r *recorder) op(kind, result string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		switch {
		case isUnavailable(err) || r.inOutage(time.Now()):
			result = resultFailedOutage
		case webhookRefused(err):
			result = resultRefusedWebhook
		default:
			result = resultFailed
		}
		if len(r.errors[kind]) < keptErrors {
			r.errors[kind] = append(r.errors[kind], err.Error())
		}
	}
	if r.ops[kind] == nil {
		r.ops[kind] = map[string]int{}
	}
	r.ops[kind][result]++
}

func (r *recorder) fault(f fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
}

// report is a run's outcome, written as soak-report.json beside the
// suite's artifacts and printed as text. hack/tools/perf/soakreport reads
// it (its own copy of these types) to write docs/reliability.md: a field
// renamed or changed in meaning here is changed there too. Times are
// RFC 3339, durations (duration, took, every, warmUp, window, span)
// nanoseconds as time.Duration encodes them.
type report struct {
	// Shape is the kind of cluster the run was on, as the run was told
	// ("local": Gantry's local runtime; "kind/stock", say, for another).
	Shape      string                    `json:"shape"`
	Seed       uint64                    `json:"seed"`
	Started    time.Time                 `json:"started"`
	Duration   time.Duration             `json:"duration"`
	Tenants    int                       `json:"tenants"`
	Ops        map[string]map[string]int `json:"operations"`
	Errors     map[string][]string       `json:"errors,omitempty"`
	Faults     []fault                   `json:"faults"`
	Checks     invariants.Counts         `json:"checks"`
	Violations []invariants.Violation    `json:"violations"`
	// Failures are the kinds of operation that failed other than because
	// kube-apiserver was unavailable, with how often: Gantry (or the run)
	// failed a tenant, and the run fails.
	Failures []string `json:"failures,omitempty"`
	// Shortfalls are the kinds of operation done less often than
	// minPerMinute asks, and the fault kinds injected fewer than
	// minFaults times.
	Shortfalls []string `json:"shortfalls,omitempty"`
	// Memory is the components' memory over the run and the Leak
	// family's verdict on it; set by judgeMemory, absent from a run that
	// did not sample memory.
	Memory *memoryReport `json:"memory,omitempty"`
}

// memoryReport is the report's "memory": how the components were read,
// the limits they were judged against, and per component its readings by
// process lifetime (a component killed and restarted starts a new one).
type memoryReport struct {
	// Every is how often each component was read.
	Every time.Duration `json:"every"`
	// HeapMetric is the metric read as the heap after GC
	// (go_gc_heap_live_bytes).
	HeapMetric string `json:"heapMetric"`
	// WarmUp and Window are invariants.Config's LeakWarmUp and
	// LeakWindow: a lifetime's level after warm-up is the median of the
	// readings of the Window that starts WarmUp after its first reading,
	// its level at the end the median of its last Window's. A lifetime
	// read for less than WarmUp and two Windows is not judged.
	WarmUp time.Duration `json:"warmUp"`
	Window time.Duration `json:"window"`
	// HeapRatioLimit and GoroutineRatioLimit are the most the level at the
	// end may be of the level after warm-up (issue 40: 1.5 and 1.10).
	HeapRatioLimit      float64 `json:"heapRatioLimit"`
	GoroutineRatioLimit float64 `json:"goroutineRatioLimit"`
	// Components are the components read, in the order the run named
	// them.
	Components []componentMemory `json:"components"`
}

// componentMemory is one component's memory over the run.
type componentMemory struct {
	Component string `json:"component"`
	// Readings is how many reads succeeded, ReadErrors how many failed (a
	// component being restarted; a metric missing), LastReadError the
	// last failure.
	Readings      int    `json:"readings"`
	ReadErrors    int    `json:"readErrors"`
	LastReadError string `json:"lastReadError,omitempty"`
	// Judged is how many of its lifetimes were judged; MaxHeapRatio and
	// MaxGoroutineRatio the largest ratios of those (0: none judged).
	Judged            int     `json:"judged"`
	MaxHeapRatio      float64 `json:"maxHeapRatio"`
	MaxGoroutineRatio float64 `json:"maxGoroutineRatio"`
	// Lifetimes are its processes' readings, oldest first.
	Lifetimes []lifetimeMemory `json:"lifetimes"`
}

// lifetimeMemory is the readings of one process of a component, and the
// verdict on them.
type lifetimeMemory struct {
	// Started is the process's start (process_start_time_seconds); From
	// and To its first and last reading, Span the time between them.
	Started time.Time     `json:"started"`
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Span    time.Duration `json:"span"`
	// Judged says whether the Leak family judged it; NotJudged why not
	// (too short, or no reading in its window after warm-up).
	Judged    bool   `json:"judged"`
	NotJudged string `json:"notJudged,omitempty"`
	// AfterWarmUp and End are the two levels compared, HeapRatio and
	// GoroutineRatio End over AfterWarmUp; set when judged.
	AfterWarmUp    *memoryLevel `json:"afterWarmUp,omitempty"`
	End            *memoryLevel `json:"end,omitempty"`
	HeapRatio      float64      `json:"heapRatio,omitempty"`
	GoroutineRatio float64      `json:"goroutineRatio,omitempty"`
	// Violations are the Leak invariants it broke (HeapGrowth,
	// GoroutineGrowth); the report's violations say by how much.
	Violations []string `json:"violations,omitempty"`
	// Samples are its readings in time order.
	Samples []memSample `json:"samples"`
}

// memoryLevel is a median of the readings from From to To.
type memoryLevel struct {
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	Readings    int       `json:"readings"`
	HeapAfterGC uint64    `json:"heapAfterGC"`
	Goroutines  int       `json:"goroutines"`
}

// memSample is one reading: the heap after GC in bytes and the goroutines.
type memSample struct {
	At          time.Time `json:"at"`
	HeapAfterGC uint64    `json:"heapAfterGC"`
	Goroutines  int       `json:"goroutines"`
}

// minFaults is how many faults of each kind a run must inject.
const minFaults = 3

func (r *recorder) report(seed uint64, started time.Time, d time.Duration, tenants int, c *invariants.Checker, faultKinds []string) *report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &report{Seed: seed, Started: started, Duration: d, Tenants: tenants, Ops: map[string]map[string]int{},
		Errors: maps.Clone(r.errors), Faults: slices.Clone(r.faults), Checks: c.Checks(), Violations: c.Violations()}
	for k, v := range r.ops {
		rep.Ops[k] = maps.Clone(v)
	}
	for _, kind := range slices.Sorted(maps.Keys(rep.Ops)) {
		if n := rep.Ops[kind][resultFailed]; n > 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %d failed (errors below)", kind, n))
		}
	}
	for _, kind := range slices.Sorted(maps.Keys(minPerMinute)) {
		done, want := rep.Ops[kind][resultDone], minPerMinute[kind]*d.Minutes()
		if float64(done) < want {
			rep.Shortfalls = append(rep.Shortfalls, fmt.Sprintf("%s: %d done, the run needs %.1f (%.1f a minute)", kind, done, want, minPerMinute[kind]))
		}
	}
	injected := map[string]int{}
	for _, f := range rep.Faults {
		if f.Error == "" {
			injected[f.Kind]++
		}
	}
	for _, kind := range faultKinds {
		if injected[kind] < minFaults {
			rep.Shortfalls = append(rep.Shortfalls, fmt.Sprintf("fault %s: injected %d times, the run needs %d", kind, injected[kind], minFaults))
		}
	}
	return rep
}

func (rep *report) write(path string) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func (rep *report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak run of %s on %s from %s, seed %d, %d tenants\n", rep.Duration, orUnknown(rep.Shape), rep.Started.UTC().Format(time.RFC3339), rep.Seed, rep.Tenants)
	b.WriteString("operations:\n")
	for _, kind := range slices.Sorted(maps.Keys(rep.Ops)) {
		var parts []string
		for _, res := range slices.Sorted(maps.Keys(rep.Ops[kind])) {
			parts = append(parts, fmt.Sprintf("%s %d", res, rep.Ops[kind][res]))
		}
		fmt.Fprintf(&b, "  %s: %s\n", kind, strings.Join(parts, ", "))
		for _, e := range rep.Errors[kind] {
			fmt.Fprintf(&b, "    error: %s\n", e)
		}
	}
	byKind := map[string]int{}
	for _, f := range rep.Faults {
		byKind[f.Kind]++
	}
	fmt.Fprintf(&b, "faults: %d", len(rep.Faults))
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		fmt.Fprintf(&b, ", %s %d", k, byKind[k])
	}
	b.WriteString("\n")
	for _, f := range rep.Faults {
		fmt.Fprintf(&b, "  %s %s at %s (%s)", f.Kind, f.Component, f.At.UTC().Format(time.RFC3339), f.Took.Round(100*time.Millisecond))
		if f.Injected > 0 {
			fmt.Fprintf(&b, ", %d requests failed or delayed", f.Injected)
		}
		if f.Error != "" {
			fmt.Fprintf(&b, ": %s", f.Error)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%s\n", rep.Checks)
	if m := rep.Memory; m != nil {
		fmt.Fprintf(&b, "memory (read every %s; per process lifetime, heap after GC and goroutines at the end against after a warm-up of %s, limits %.2fx and %.2fx):\n",
			m.Every, m.WarmUp, m.HeapRatioLimit, m.GoroutineRatioLimit)
		for _, c := range m.Components {
			fmt.Fprintf(&b, "  %s\n", c)
		}
	}
	fmt.Fprintf(&b, "violations: %d\n", len(rep.Violations))
	for _, v := range rep.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(&b, "failure: %s\n", f)
	}
	for _, s := range rep.Shortfalls {
		fmt.Fprintf(&b, "shortfall: %s\n", s)
	}
	return b.String()
}

// String is the component's line of the text report: lifetimes judged,
// the largest ratios seen, and what could not be judged or read.
func (c componentMemory) String() string {
	s := fmt.Sprintf("%s: %d of %d lifetimes judged", c.Component, c.Judged, len(c.Lifetimes))
	if c.Judged > 0 {
		s += fmt.Sprintf(", heap after GC at most %.2fx, goroutines at most %.2fx", c.MaxHeapRatio, c.MaxGoroutineRatio)
	}
	var short []string
	for _, l := range c.Lifetimes {
		if !l.Judged {
			short = append(short, l.Span.Round(time.Second).String())
		}
	}
	if len(short) > 0 {
		s += fmt.Sprintf("; not judged: %d (read for %s)", len(short), strings.Join(short, ", "))
	}
	if c.ReadErrors > 0 {
		s += fmt.Sprintf("; %d of %d reads failed, the last: %s", c.ReadErrors, c.ReadErrors+c.Readings, c.LastReadError)
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "(shape not given)"
	}
	return s
}

// An error while kube-apiserver is killed and not yet ready again, or
// within outageSlack after, is the outage's; one before the kill or later
// fails the run.
func TestRecorderOutage(t *testing.T) {
	r := newRecorder()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if r.inOutage(t0) {
		t.Error("an outage before any kill")
	}
	r.apiserverDown(t0)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{-time.Second, false}, {0, true}, {time.Minute, true}} {
		if got := r.inOutage(t0.Add(c.at)); got != c.want {
			t.Errorf("not ready yet, at %s: %v, want %v", c.at, got, c.want)
		}
	}
	r.apiserverUp(t0.Add(10 * time.Second))
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{12 * time.Second, true}, {15 * time.Second, false}, {time.Minute, false}} {
		if got := r.inOutage(t0.Add(c.at)); got != c.want {
			t.Errorf("ready at 10s, at %s: %v, want %v", c.at, got, c.want)
		}
	}
}
