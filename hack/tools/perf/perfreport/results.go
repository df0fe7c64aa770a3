package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// key names one benchmark: the suite (PerfScheduling, PreemptionClientQPS),
// the profile or test case (Upstream, GantryMixedChurn, ...), and the
// workload (5000Nodes_10000Pods, ...).
type key struct{ Suite, Profile, Workload string }

func (k key) String() string { return k.Suite + "/" + k.Profile + "/" + k.Workload }

// results are every repetition of every benchmark of one run.
type results struct {
	order   []key
	metrics map[key]map[string][]float64 // unit -> one value per repetition
	// From the harness's data items: each repetition's p99 of the pod
	// scheduling SLI (entering the active queue to binding), in ms, over
	// every pod since the workload began: scheduler_perf's reset before
	// measuring resets a gathered copy, not the histogram.
	sliP99 map[key][]float64
	// From reservations.jsonl: each repetition's reservation use.
	consumed map[key][]consumption
}

type consumption struct {
	Benchmark            string `json:"benchmark"`
	Reservations         int    `json:"reservations"`
	OwnerPods            int    `json:"ownerPods"`
	OwnersInReservations int    `json:"ownersInReservations"`
	Succeeded            int    `json:"succeeded"`
	// Owner latency, created to bound as a pod watch sees it, in ms:
	// p50, p90, p99 and max over the owners the watch saw created and then
	// bound into a reservation; Unreserved... over those bound without one.
	OwnerLatencyMs           map[string]float64 `json:"ownerLatencyMs"`
	OwnersTimed              int                `json:"ownersTimed"`
	UnreservedOwnerLatencyMs map[string]float64 `json:"unreservedOwnerLatencyMs"`
	UnreservedOwnersTimed    int                `json:"unreservedOwnersTimed"`
}

func newResults() *results {
	return &results{metrics: map[key]map[string][]float64{}, sliP99: map[key][]float64{}, consumed: map[key][]consumption{}}
}

// gomaxprocs is the -N go test appends to a benchmark's name.
var gomaxprocs = regexp.MustCompile(`-\d+$`)

// parseName splits "BenchmarkPerfScheduling/Gantry/5000Nodes-2" (or the
// same without -N, or with a trailing data-item collector name).
func parseName(name string, withCollector bool) (key, bool) {
	name = strings.TrimPrefix(name, "Benchmark")
	parts := strings.Split(name, "/")
	if withCollector && len(parts) == 4 {
		parts = parts[:3]
	}
	if len(parts) != 3 {
		return key{}, false
	}
	return key{Suite: parts[0], Profile: parts[1], Workload: gomaxprocs.ReplaceAllString(parts[2], "")}, true
}

// readBench reads go test -bench output: "BenchmarkX/a/b-2  1  v1 unit1  v2 unit2 ...".
// Output written to stderr while a benchmark runs can land between its name
// and its figures; the figures then start a later line of their own
// ("  1  v1 unit1 ..."), and are given to the last name left without any.
func (r *results) readBench(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	line := 0
	var pending *key // a benchmark name whose figures have not come yet
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var k key
		switch {
		case strings.HasPrefix(f[0], "Benchmark"):
			var ok bool
			if k, ok = parseName(f[0], false); !ok {
				continue
			}
			if len(f) < 2 || !isCount(f[1]) {
				pending = &k
				continue
			}
			f = f[1:]
		case pending != nil && isCount(f[0]) && len(f) >= 3 && len(f)%2 == 1:
			k = *pending
		default:
			continue
		}
		pending = nil
		if len(f)%2 != 1 {
			return fmt.Errorf("line %d: figures do not come in value-unit pairs", line)
		}
		if r.metrics[k] == nil {
			r.metrics[k] = map[string][]float64{}
			r.order = append(r.order, k)
		}
		for i := 1; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("line %d: %q is not a number", line, f[i])
			}
			r.metrics[k][f[i+1]] = append(r.metrics[k][f[i+1]], v)
		}
	}
	return sc.Err()
}

func isCount(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

type dataItems struct {
	DataItems []struct {
		Data   map[string]float64 `json:"data"`
		Labels map[string]string  `json:"labels"`
	} `json:"dataItems"`
}

const sliMetric = "scheduler_pod_scheduling_sli_duration_seconds"

// readItems reads the harness's data-item files (one per repetition of
// BenchmarkPerfScheduling) and reservations.jsonl from dir.
func (r *results) readItems(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "BenchmarkPerfScheduling_*.json"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var d dataItems
		if err := json.Unmarshal(b, &d); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, it := range d.DataItems {
			if it.Labels["Metric"] != sliMetric {
				continue
			}
			if k, ok := parseName(it.Labels["Name"], true); ok {
				r.sliP99[k] = append(r.sliP99[k], it.Data["Perc99"])
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "reservations.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var c consumption
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			return fmt.Errorf("reservations.jsonl line %d: %w", i+1, err)
		}
		if k, ok := parseName(c.Benchmark, false); ok {
			r.consumed[k] = append(r.consumed[k], c)
		}
	}
	return nil
}

// throughputUnit is the metric scheduler_perf reports pods/s in;
// BenchmarkPreemptionClientQPS reports "pods/s".
func throughput(r *results, k key) []float64 {
	if v := r.metrics[k]["SchedulingThroughput/Average"]; v != nil {
		return v
	}
	return r.metrics[k]["pods/s"]
}

var reservationsSuffix = regexp.MustCompile(`_(\d+)Reservations$`)

// reservationsOf returns how many reservations a workload has, and the
// workload it is compared against (the same without them).
func reservationsOf(workload string) (int, string) {
	m := reservationsSuffix.FindStringSubmatch(workload)
	if m == nil {
		return 0, workload
	}
	n, _ := strconv.Atoi(m[1])
	return n, strings.TrimSuffix(workload, m[0])
}

var nodesPrefix = regexp.MustCompile(`^(\d+)Nodes_`)

func nodesOf(workload string) int {
	m := nodesPrefix.FindStringSubmatch(workload)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// upstreamOf is the upstream profile's test case for one of Gantry's:
// GantryMixedChurn -> UpstreamMixedChurn; "" for Gantry-only test cases.
func upstreamOf(profile string) string {
	if !strings.HasPrefix(profile, "Gantry") {
		return ""
	}
	switch rest := strings.TrimPrefix(profile, "Gantry"); rest {
	case "Owners", "NonOwners":
		return ""
	default:
		return "Upstream" + rest
	}
}

// shapeOf names the upstream scheduler_perf test case a profile's workloads
// are shaped after.
func shapeOf(profile string) string {
	for _, p := range []string{"Upstream", "Gantry"} {
		profile = strings.TrimPrefix(profile, p)
	}
	switch profile {
	case "", "Owners", "NonOwners":
		return "SchedulingBasic"
	case "MixedChurn":
		return "SchedulingWithMixedChurn"
	case "WhileGated":
		return "SchedulingWhileGated"
	case "Preemption":
		return "PreemptionAsync"
	case "Gang":
		return "GangScheduling"
	}
	return profile
}

// normalize writes throughput samples as benchstat input. Set "profiles":
// every workload of a Gantry test case that has an upstream one, with the
// profile as a name key (benchstat -col /profile puts upstream and Gantry
// side by side). Set "reservations": every pair of workloads, with and
// without reservations, with their number as a name key (-col
// /reservations); a workload with reservations and no counterpart without
// (GantryOwners) has nothing to be compared with and is left out.
func (r *results) normalize(w io.Writer, set string) error {
	withReservations, measured := map[key]bool{}, map[key]bool{}
	for _, k := range r.order {
		measured[k] = true
		if n, base := reservationsOf(k.Workload); n > 0 {
			withReservations[key{k.Suite, k.Profile, base}] = true
		}
	}
	for _, k := range r.order {
		n, base := reservationsOf(k.Workload)
		var name string
		switch set {
		case "profiles":
			if n > 0 || (upstreamOf(k.Profile) == "" && !strings.HasPrefix(k.Profile, "Upstream")) {
				continue
			}
			// A Gantry case that ran without upstream's beside it
			// (BenchmarkReservationCost) has nothing to compare.
			if up := upstreamOf(k.Profile); up != "" && !measured[key{k.Suite, up, k.Workload}] {
				continue
			}
			profile := "Upstream"
			if strings.HasPrefix(k.Profile, "Gantry") {
				profile = "Gantry"
			}
			tag := k.Suite
			if k.Suite == "PerfScheduling" {
				tag = shapeOf(k.Profile)
			}
			name = fmt.Sprintf("Benchmark%s/%s/profile=%s", tag, k.Workload, profile)
		case "reservations":
			if (n == 0 && !withReservations[k]) || (n > 0 && !measured[key{k.Suite, k.Profile, base}]) {
				continue
			}
			tag := k.Profile
			if k.Suite != "PerfScheduling" {
				tag = k.Suite + k.Profile // ReservationCostGantry: not to be pooled with scheduler_perf's
			}
			name = fmt.Sprintf("Benchmark%s/%s/reservations=%d", tag, base, n)
		default:
			return fmt.Errorf("unknown set %q (profiles, reservations)", set)
		}
		for _, v := range throughput(r, k) {
			if _, err := fmt.Fprintf(w, "%s 1 %g pods/s\n", name, v); err != nil {
				return err
			}
		}
	}
	return nil
}
