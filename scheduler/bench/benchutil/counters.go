package benchutil

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics/legacyregistry"
)

// CountedFamilies are the scheduler's counters that say how a workload's
// pods went through the queue: attempts by result, preemptions (upstream's
// DefaultPreemption and Gantry's AsyncPreemption count their own), and why
// pods entered each queue; and kube-apiserver's requests by resource, verb
// and code (the process holds both), which show what a workload's API
// writes were and whether any of them conflicted.
var CountedFamilies = []string{
	"apiserver_request_total",
	"scheduler_schedule_attempts_total",
	"scheduler_preemption_attempts_total",
	"scheduler_preemption_victims",
	"gantry_preemption_attempts_total",
	"gantry_preemption_victims_total",
	"scheduler_queue_incoming_pods_total",
}

// counterSample is how often the counters are read. The harness resets the
// registry when a workload ends, before any cleanup runs, so the highest
// value read is kept; increments in the last sample period are missed.
const counterSample = 200 * time.Millisecond

var digits = regexp.MustCompile(`[0-9]+`)

// WatchCounters, when $GANTRY_BENCH_COUNTERS is set, records for the
// workload benchmark the scheduler counters above and the FailedScheduling
// events' messages (numbers replaced by N), and how many pods failed how
// often, to $ARTIFACTS/counters.jsonl: where the time of a scheduler went
// (how many whole cycles ended unschedulable, and why), which CPU profiles
// cannot tell apart. The counters count from the moment it is called: what
// they held then (the workload's nodes and reservations being made) is
// subtracted. The FailedScheduling events are the whole workload's.
func WatchCounters(tc T, client kubernetes.Interface, benchmark string) {
	if os.Getenv(EnvCounters) == "" {
		return
	}
	base, err := ReadCounters()
	if err != nil {
		tc.Logf("reading the counters: %v", err)
		return
	}
	var mu sync.Mutex
	seen := map[string]float64{}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(counterSample)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sample, err := ReadCounters()
			if err != nil {
				continue
			}
			mu.Lock()
			for k, v := range sample {
				seen[k] = max(seen[k], v)
			}
			mu.Unlock()
		}
	}()
	tc.Cleanup(func() {
		stop()
		<-done
		failures, perPod, err := failedScheduling(client)
		if err != nil {
			tc.Logf("reading FailedScheduling events: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for k, v := range seen {
			if seen[k] = v - base[k]; seen[k] == 0 {
				delete(seen, k)
			}
		}
		tc.Logf("scheduler counters: %v; FailedScheduling: %v; pods by failures: %v", seen, failures, perPod)
		if err := AppendJSON(CountersFile, map[string]any{"benchmark": benchmark, "counters": seen,
			"failedScheduling": failures, "podsByFailures": perPod}); err != nil {
			tc.Logf("recording the counters: %v", err)
		}
	})
}

// ReadCounters reads the series of CountedFamilies once, by name and
// labels ("scheduler_schedule_attempts_total{profile=...,result=...}"); a
// histogram counts its samples.
func ReadCounters() (map[string]float64, error) {
	fams, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range fams {
		name := f.GetName()
		if !slices.Contains(CountedFamilies, name) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out, nil
}

// failedScheduling counts the FailedScheduling events by message, and the
// pods by how many times they failed (an aggregated event counts its series).
func failedScheduling(client kubernetes.Interface) (map[string]int, map[int]int, error) {
	evs, err := client.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	byMessage, byPod := map[string]int{}, map[string]int{}
	for _, e := range evs.Items {
		if e.Reason != "FailedScheduling" {
			continue
		}
		n := max(int(e.DeprecatedCount), 1)
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		byMessage[digits.ReplaceAllString(e.Note, "N")] += n
		byPod[e.Regarding.Namespace+"/"+e.Regarding.Name] += n
	}
	perPod := map[int]int{}
	for _, n := range byPod {
		perPod[n]++
	}
	return byMessage, perPod, nil
}
