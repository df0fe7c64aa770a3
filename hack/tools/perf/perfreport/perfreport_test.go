package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Three repetitions as go test prints them, with scheduler_perf's and
// BenchmarkPreemptionVictimDeleteFaults' metrics, and one of
// BenchmarkReservationCost's; noise lines in between.
const benchOutput = `goos: linux
BenchmarkPerfScheduling/Upstream/5000Nodes_10000Pods-2  1  50.1 SchedulingDuration/Duration  200 SchedulingThroughput/Average  180 SchedulingThroughput/Perc50
BenchmarkPerfScheduling/Gantry/5000Nodes_10000Pods-2  1  40.2 SchedulingDuration/Duration  250 SchedulingThroughput/Average
BenchmarkPerfScheduling/Gantry/5000Nodes_10000Pods_3000Reservations-2  1  225 SchedulingThroughput/Average
    executor.go:835: namespace: namespace-1, pods: want 1000, got 343
BenchmarkPerfScheduling/Upstream/5000Nodes_10000Pods-2         	[controller-runtime] log.SetLogger(...) was never called; logs will not be displayed.
Detected at:
	>  goroutine 943198 [running]:
       1	        38.90 SchedulingDuration/Duration	       210 SchedulingThroughput/Average
BenchmarkPerfScheduling/Gantry/5000Nodes_10000Pods-2  1  260 SchedulingThroughput/Average
BenchmarkPerfScheduling/Gantry/5000Nodes_10000Pods_3000Reservations-2  1  230 SchedulingThroughput/Average
BenchmarkPerfScheduling/Upstream/5000Nodes_10000Pods-2  1  190 SchedulingThroughput/Average
BenchmarkPerfScheduling/Gantry/5000Nodes_10000Pods-2  1  240 SchedulingThroughput/Average
BenchmarkPerfScheduling/Gantry/5000Nodes_10000Pods_3000Reservations-2  1  220 SchedulingThroughput/Average
BenchmarkPerfScheduling/GantryOwners/5000Nodes_20InFlight_3000Reservations-2  1  150 SchedulingThroughput/Average
BenchmarkPreemptionVictimDeleteFaults/UpstreamPreemption/QPS50_DeleteFault10s-2  1  9 ns/op  20 pods/s  1.0 pod-patches/pod  2.0 victim-deletes/pod  1.0 binds/pod  30.5 s-to-bind-p99  14.0 s-over-backoff-p99
BenchmarkPreemptionVictimDeleteFaults/GantryPreemption/QPS50_DeleteFault10s-2  1  9 ns/op  25 pods/s  1.0 pod-patches/pod  1.5 victim-deletes/pod  1.0 binds/pod  4.5 api-calls/pod  16.0 s-to-bind-p99  1.5 s-over-backoff-p99
BenchmarkReservationCost/Gantry/5000Nodes_10000Pods-2  1  78862216544 ns/op  6.6 apiserver-cpu-ms/pod  1.6 etcd-cpu-ms/pod  7.1 scheduler-cpu-ms/pod  0 owners-in-reservations  126.8 pods/s  0 status-writes/pod
BenchmarkReservationCost/Gantry/5000Nodes_10000Pods_3000Reservations-2  1  81980609384 ns/op  7.9 apiserver-cpu-ms/pod  1.7 etcd-cpu-ms/pod  6.5 scheduler-cpu-ms/pod  3000 owners-in-reservations  122.0 pods/s  0.184 status-writes/pod  17.2 status-lag-s
PASS
`

func readTestResults(t *testing.T) *results {
	t.Helper()
	r := newResults()
	if err := r.readBench(strings.NewReader(benchOutput)); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReadBench(t *testing.T) {
	r := readTestResults(t)
	if len(r.order) != 8 {
		t.Fatalf("read %d benchmarks, want 8: %v", len(r.order), r.order)
	}
	k := key{"PerfScheduling", "Gantry", "5000Nodes_10000Pods_3000Reservations"}
	if got := throughput(r, k); len(got) != 3 || got[0] != 225 || got[2] != 220 {
		t.Errorf("throughput of %s = %v, want [225 230 220]", k, got)
	}
	if got := r.metrics[key{"PreemptionVictimDeleteFaults", "GantryPreemption", "QPS50_DeleteFault10s"}]["s-over-backoff-p99"]; len(got) != 1 || got[0] != 1.5 {
		t.Errorf("s-over-backoff-p99 = %v, want [1.5]", got)
	}
	u := throughput(r, key{"PerfScheduling", "Upstream", "5000Nodes_10000Pods"})
	if len(u) != 3 || u[1] != 210 {
		t.Errorf("upstream throughput = %v: the repetition whose figures came after other output was lost", u)
	}
	if err := newResults().readBench(strings.NewReader("BenchmarkX/a/b-2 1 nope pods/s\n")); err == nil {
		t.Error("a value that is not a number was accepted")
	}
}

func TestRatioOfMeans(t *testing.T) {
	r := readTestResults(t)
	g := newStat(throughput(r, key{"PerfScheduling", "Gantry", "5000Nodes_10000Pods"}))
	u := newStat(throughput(r, key{"PerfScheduling", "Upstream", "5000Nodes_10000Pods"}))
	if rt, p := ratio(g, u); rt != "1.25×" || p != "0.10" {
		t.Errorf("ratio = %s (p=%s), want 1.25× (p=0.10: three samples a side, no overlap)", rt, p)
	}
	if got := g.cell(); got != "250.0 (240.0–260.0, n=3)" {
		t.Errorf("cell = %q", got)
	}
}

func TestNormalizeForBenchstat(t *testing.T) {
	r := readTestResults(t)
	var b bytes.Buffer
	if err := r.normalize(&b, "profiles"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"BenchmarkSchedulingBasic/5000Nodes_10000Pods/profile=Upstream 1 200 pods/s\n",
		"BenchmarkSchedulingBasic/5000Nodes_10000Pods/profile=Gantry 1 240 pods/s\n",
		"BenchmarkPreemptionVictimDeleteFaults/QPS50_DeleteFault10s/profile=Gantry 1 25 pods/s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("profiles set lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Reservations") {
		t.Errorf("profiles set holds a reservation workload:\n%s", out)
	}
	if strings.Contains(out, "ReservationCost") {
		t.Errorf("profiles set holds a benchmark that ran no upstream profile:\n%s", out)
	}
	b.Reset()
	if err := r.normalize(&b, "reservations"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for prefix, want := range map[string]int{
		"BenchmarkGantry/5000Nodes_10000Pods/reservations=3000 ":                3,
		"BenchmarkGantry/5000Nodes_10000Pods/reservations=0 ":                   3,
		"BenchmarkReservationCostGantry/5000Nodes_10000Pods/reservations=3000 ": 1,
		"BenchmarkReservationCostGantry/5000Nodes_10000Pods/reservations=0 ":    1,
	} {
		got := 0
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				got++
			}
		}
		if got != want {
			t.Errorf("reservations set has %d samples of %q, want %d (the two suites are not pooled):\n%s", got, prefix, want, b.String())
		}
	}
}

func TestDocAndPlot(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench.txt")
	if err := os.WriteFile(bench, []byte(benchOutput), 0o644); err != nil {
		t.Fatal(err)
	}
	items := `{"benchmark":"BenchmarkPerfScheduling/Gantry/5000Nodes_10000Pods_3000Reservations","reservations":3000,"ownerPods":5000,"ownersInReservations":3000,"succeeded":2478,"ownerLatencyMs":{"p50":110,"p90":240,"p99":346,"max":534},"ownersTimed":3000,"unreservedOwnerLatencyMs":{"p50":2680,"p90":4220,"p99":4903,"max":5101},"unreservedOwnersTimed":2000}` + "\n" +
		`{"benchmark":"BenchmarkPerfScheduling/GantryOwners/5000Nodes_20InFlight_3000Reservations","reservations":3000,"ownerPods":1520,"ownersInReservations":1519,"succeeded":1400,"ownerLatencyMs":{"p50":13.3,"p90":28.6,"p99":54.4,"max":58.6},"ownersTimed":1520}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "reservations.jsonl"), []byte(items), 0o644); err != nil {
		t.Fatal(err)
	}
	doc, plot := filepath.Join(dir, "docs", "performance.md"), filepath.Join(dir, "docs", "performance.png")
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"doc", "-bench", bench, "-items", dir, "-what", "all", "-count", "3", "-kubernetes", "1.37.2", "-out", doc, "-png", plot}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"![pods/s against nodes and against reservations](performance.png)",
		"| SchedulingBasic | 5000Nodes_10000Pods | 200.0 (190.0–210.0, n=3) | 250.0 (240.0–260.0, n=3) | **1.25×** | 0.10 |",
		"| Gantry | 5000Nodes_10000Pods_3000Reservations | 250.0 (240.0–260.0, n=3) | 225.0 (220.0–230.0, n=3) | **0.90×** | 0.10 | 3000/3000 | 2478/3000 | 346 / 4903 |",
		"| 30.50 / 16.00 | 14.00 / 1.50 |",
		"| —; 1.00, 2.00, 1.00 / 4.50; 1.00, 1.50, 1.00 |",
		"an `_<N>InFlight` workload keeps N owners in the cluster",
		"- 5000Nodes_20InFlight_3000Reservations: owner latency 13 / 29 / 54 / 59 (1520 of 1520 owners timed);",
		"owners in reservations 1519/1520; Succeeded at the end 1400/1519; 150.0 (150.0–150.0, n=1) pods/s.",
		"| 5000Nodes_10000Pods_3000Reservations | 126.8 (126.8–126.8, n=1) | 122.0 (122.0–122.0, n=1) | **0.96×** |",
		"| 7.10 → 6.50; 6.60 → 7.90; 1.60 → 1.70 | 0.18; 17.20 | 3000 |",
		"Regenerate this page (and its plot) with:\n\n```\nmake bench-scheduler WHAT=all DOC=1 COUNT=3\n```\n",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the page lacks %q:\n%s", want, md)
		}
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 420 {
		t.Errorf("plot is %v, want two 640x420 panels", b)
	}
}

// The gang shapes (LABELS=gantry-gang) come in as any Upstream*/Gantry*
// pair does: compared on the page and in benchstat's profiles set under
// upstream's name for the shape, and, with reservations, against the same
// gangs without.
func TestGangShapes(t *testing.T) {
	const gangs = `BenchmarkPerfScheduling/UpstreamGang/500Nodes_100Gangs_300Pods-2  1  100 SchedulingThroughput/Average
BenchmarkPerfScheduling/GantryGang/500Nodes_100Gangs_300Pods-2  1  90 SchedulingThroughput/Average
BenchmarkPerfScheduling/GantryGang/500Nodes_100Gangs_300Pods_300Reservations-2  1  80 SchedulingThroughput/Average
`
	r := newResults()
	if err := r.readBench(strings.NewReader(gangs)); err != nil {
		t.Fatal(err)
	}
	if got := upstreamOf("GantryGang"); got != "UpstreamGang" {
		t.Errorf("upstreamOf(GantryGang) = %q, want UpstreamGang", got)
	}
	var b bytes.Buffer
	for _, set := range []string{"profiles", "reservations"} {
		if err := r.normalize(&b, set); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{
		"BenchmarkGangScheduling/500Nodes_100Gangs_300Pods/profile=Upstream 1 100 pods/s\n",
		"BenchmarkGangScheduling/500Nodes_100Gangs_300Pods/profile=Gantry 1 90 pods/s\n",
		"BenchmarkGantryGang/500Nodes_100Gangs_300Pods/reservations=0 1 90 pods/s\n",
		"BenchmarkGantryGang/500Nodes_100Gangs_300Pods/reservations=300 1 80 pods/s\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("benchstat input lacks %q:\n%s", want, b.String())
		}
	}
	var md bytes.Buffer
	writeDoc(&md, docInput{res: r, kube: "1.37.2", plot: "performance.png"})
	for _, want := range []string{
		"| GangScheduling | 500Nodes_100Gangs_300Pods | 100.0 (100.0–100.0, n=1) | 90.0 (90.0–90.0, n=1) | **0.90×** |",
		"| GantryGang | 500Nodes_100Gangs_300Pods_300Reservations | 90.0 (90.0–90.0, n=1) | 80.0 (80.0–80.0, n=1) | **0.89×** |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the page lacks %q:\n%s", want, md.String())
		}
	}
}
