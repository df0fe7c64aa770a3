package main

import (
	"fmt"
	"slices"
	"strings"
)

// runInfo is what the run that made a page was asked for: `make bench-scheduler`'s
// knobs, as hack/bench-scheduler.sh passes them in.
type runInfo struct {
	what   string // WHAT: perf or all
	count  int    // COUNT
	bench  string // BENCH, "" for the default
	labels string // LABELS, "" for the default
	keep   bool   // KEEP=1: the repetitions were added to an earlier run's
}

// otherHarnesses are the harnesses whose results a page made by a run of
// WHAT=perf takes in from earlier runs of their own: the selector that runs
// each, and the suites of its results, whose repetitions are counted.
var otherHarnesses = []struct {
	what   string
	suites []string
}{
	{"qps", []string{"PreemptionClientQPS", "PreemptionVictimDeleteFaults"}},
	{"cost", []string{"ReservationCost"}},
}

// everything is the command that regenerates the whole page.
func everything(count int) string {
	return fmt.Sprintf("make bench-scheduler WHAT=all DOC=1 COUNT=%d", count)
}

// regenerate is the commands that regenerate the page r makes: the run's
// own, and when it ran less than everything, the runs of the other
// harnesses whose results the page has (with as many repetitions as it
// has of them), and the command for everything.
func regenerate(in runInfo, r *results) []string {
	if in.what == "all" && in.bench == "" && in.labels == "" {
		return []string{everything(in.count)}
	}
	var out []string
	if in.what != "all" {
		for _, h := range otherHarnesses {
			if h.what == in.what {
				continue
			}
			if n := r.repetitions(h.suites...); n > 0 {
				out = append(out, fmt.Sprintf("make bench-scheduler WHAT=%s COUNT=%d", h.what, n))
			}
		}
	}
	own := []string{"make bench-scheduler", "WHAT=" + in.what, "DOC=1", fmt.Sprintf("COUNT=%d", in.count)}
	if in.keep {
		own = append(own, "KEEP=1")
	}
	if in.bench != "" {
		own = append(own, "BENCH='"+in.bench+"'")
	}
	if in.labels != "" {
		own = append(own, "LABELS='"+in.labels+"'")
	}
	return append(out, strings.Join(own, " "),
		"# Everything (every workload, hours at COUNT=3 on 2 cores): "+everything(3))
}

// repetitions is how many times the run repeated the benchmarks of
// suites: the most samples any one of them has of any figure.
func (r *results) repetitions(suites ...string) int {
	n := 0
	for _, k := range r.order {
		if !slices.Contains(suites, k.Suite) {
			continue
		}
		for _, vs := range r.metrics[k] {
			n = max(n, len(vs))
		}
	}
	return n
}
