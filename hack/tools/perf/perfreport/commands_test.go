package main

import (
	"slices"
	"strings"
	"testing"
)

func TestCommands(t *testing.T) {
	const all3 = "# Everything (every workload, hours at COUNT=3 on 2 cores): make bench-scheduler WHAT=all DOC=1 COUNT=3"
	// benchOutput has one repetition of each preemption-under-faults case
	// (a qps benchmark) and of each reservation-cost workload.
	withCost := readTestResults(t)
	withQPS := newResults()
	qps := "BenchmarkPreemptionClientQPS/UpstreamPreemption/QPS50-2  1  9 ns/op  20 pods/s\n" +
		"BenchmarkPreemptionClientQPS/GantryPreemption/QPS50-2  1  9 ns/op  25 pods/s\n"
	if err := withQPS.readBench(strings.NewReader(qps + qps)); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		run  runInfo
		res  *results
		want []string
	}{
		"everything": {
			run:  runInfo{what: "all", count: 3},
			res:  withCost,
			want: []string{"make bench-scheduler WHAT=all DOC=1 COUNT=3"},
		},
		"everything, fewer labels": {
			run:  runInfo{what: "all", count: 1, labels: "gantry-short"},
			res:  withCost,
			want: []string{"make bench-scheduler WHAT=all DOC=1 COUNT=1 LABELS='gantry-short'", all3},
		},
		"perf with an earlier cost run": {
			run: runInfo{what: "perf", count: 3, bench: "BenchmarkPerfScheduling/Gantry", labels: "gantry gantry-preemption", keep: true},
			res: withCost,
			want: []string{
				"make bench-scheduler WHAT=qps COUNT=1",
				"make bench-scheduler WHAT=cost COUNT=1",
				"make bench-scheduler WHAT=perf DOC=1 COUNT=3 KEEP=1 BENCH='BenchmarkPerfScheduling/Gantry' LABELS='gantry gantry-preemption'",
				all3,
			},
		},
		"perf with an earlier qps run": {
			run:  runInfo{what: "perf", count: 2},
			res:  withQPS,
			want: []string{"make bench-scheduler WHAT=qps COUNT=2", "make bench-scheduler WHAT=perf DOC=1 COUNT=2", all3},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := regenerate(tc.run, tc.res); !slices.Equal(got, tc.want) {
				t.Errorf("regenerate:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
