//go:build kueue_bench

package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/scheduler/bench/benchutil"
)

var (
	docFlag     = flag.String("doc", "", "TestWriteDoc writes the page here (e.g. docs/performance-kueue.md); empty skips it")
	resultsFlag = flag.String("results", "", "TestWriteDoc reads kueue-admission.jsonl and provisioner-throughput.jsonl from this directory")
	commandFlag = flag.String("command", "make bench-kueue DOC=1", "the command the page names as the one that made it")
	noteFlag    = flag.String("note", "", "a paragraph about the runs (what else ran, which commit), written under the page's introduction")
)

// caBestEffortAtomicPerSecond is cluster-autoscaler's documented pace for
// best-effort-atomic-scale-up requests: one request per scan loop, every
// --scan-interval (10 s by default).
const caBestEffortAtomicPerSecond = 0.1

// caPace is the line that sets the figures beside cluster-autoscaler's.
const caPace = "cluster-autoscaler, as documented: one best-effort-atomic-scale-up request per scan loop " +
	"(--scan-interval, 10 s by default), 0.1 requests/s, whatever the cluster's size"

// printTable prints the runs of this process, then cluster-autoscaler's
// pace.
func printTable(w io.Writer) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if len(results) == 0 {
		return
	}
	fmt.Fprintln(w)
	writeAdmissionTable(w, results)
	fmt.Fprintf(w, "\n%s; the slowest run above admits %.0f× that.\n", caPace, minRate(results)/caBestEffortAtomicPerSecond)
}

func minRate(rs []admissionResult) float64 {
	lowest := math.Inf(1)
	for _, r := range rs {
		lowest = math.Min(lowest, r.PerSecond)
	}
	return lowest
}

// ms formats a percentile of a latency map.
func ms(m map[string]float64, key string) string {
	v, ok := m[key]
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.0f", v)
}

func writeAdmissionTable(w io.Writer, rs []admissionResult) {
	fmt.Fprintln(w, "| nodes | Jobs | admitted | admissions/s | Job → Admitted p50 / p99 ms | Kueue's part p50 / p99 ms | gantry-provisioner's part p50 / p99 ms | provisioner's part the larger | requests (Failed) | QuotaReserved p50 / p99 ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %d | %d | %.1f | %s / %s | %s / %s | %s / %s | %d of %d | %d (%d) | %s / %s |\n",
			r.Nodes, r.Jobs, r.Admitted, r.PerSecond, ms(r.Total, "p50"), ms(r.Total, "p99"), ms(r.Kueue, "p50"), ms(r.Kueue, "p99"),
			ms(r.Provisioner, "p50"), ms(r.Provisioner, "p99"), r.ProvisionerLarger, r.Timed, r.RequestsRun, r.Failed,
			ms(r.QuotaReserved, "p50"), ms(r.QuotaReserved, "p99"))
	}
}

// throughputResult is a line of provisioner-throughput.jsonl.
type throughputResult = benchutil.ProvisionerThroughput

func writeThroughputTable(w io.Writer, rs []throughputResult) {
	fmt.Fprintln(w, "| run | QPS / burst | workers | requests × pods, nodes | decisions/s | first seen → decided p50 / p99 ms | created → decided p50 / p99 ms | reconciles a request | API writes a request | booked pods not placed | Failed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		// "—": not recorded by the run.
		reconciles, workers, notPlaced, writes := "—", "—", "—", "—"
		if r.ReconcilesPerRequest > 0 {
			reconciles = fmt.Sprintf("%.1f", r.ReconcilesPerRequest)
		}
		if r.Workers > 0 {
			workers = fmt.Sprint(r.Workers)
		}
		if r.WritesPerRequest > 0 {
			writes = fmt.Sprintf("%.1f", r.WritesPerRequest)
		}
		if r.NotPlaced != nil {
			notPlaced = fmt.Sprint(*r.NotPlaced)
		}
		fmt.Fprintf(w, "| %s | %g / %d | %s | %d × %d, %d | %.1f | %s / %s | %s / %s | %s | %s | %s | %d |\n",
			r.Limits, r.QPS, r.Burst, workers, r.Requests, r.Pods, r.Nodes, r.PerSecond,
			ms(r.Decide, "p50"), ms(r.Decide, "p99"), ms(r.Created, "p50"), ms(r.Created, "p99"), reconciles, writes, notPlaced, r.Failed)
	}
}

// readJSONL reads the lines of file in dir into a slice of T; a missing
// file is no lines.
func readJSONL[T any](dir, file string) ([]T, error) {
	f, err := os.Open(filepath.Join(dir, file))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// TestWriteDoc writes docs/performance-kueue.md (-doc) from the results of
// -results: every run recorded there, in the order recorded. `make
// bench-kueue DOC=1` runs it after the benchmarks.
func TestWriteDoc(t *testing.T) {
	if *docFlag == "" {
		t.Skip("no -doc")
	}
	adm, err := readJSONL[admissionResult](*resultsFlag, AdmissionFile)
	if err != nil {
		t.Fatal(err)
	}
	thr, err := readJSONL[throughputResult](*resultsFlag, "provisioner-throughput.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(adm) == 0 && len(thr) == 0 {
		t.Fatalf("no results in %q", *resultsFlag)
	}
	slices.SortStableFunc(adm, func(a, b admissionResult) int { return (a.Nodes*100000 + a.Jobs) - (b.Nodes*100000 + b.Jobs) })
	var b strings.Builder
	writeDoc(&b, adm, thr)
	if err := os.WriteFile(*docFlag, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeDoc(w io.Writer, adm []admissionResult, thr []throughputResult) {
	fmt.Fprintf(w, `# Kueue admission with gantry-provisioner

<!-- Generated by e2e/kueue/bench (%s). Do not edit. -->

Measured on one machine (%d CPUs, %s/%s), on %s. Every figure comes from watch events seen by the
benchmark's own informers, not from condition timestamps (one-second resolution). Absolute rates on a
shared machine move from run to run; each line is one run.

## Jobs through Kueue to Admitted

BenchmarkKueueAdmission (e2e/kueue/bench) brings up a local Gantry cluster with Kueue
(`+"`gantry-cluster up --kueue`"+`, kwok nodes, every control-plane process on this machine), makes a
ClusterQueue whose admission check is a check-capacity ProvisioningRequestConfig, and creates the Jobs
at once (one pod of 100m CPU each). Kueue's part of a Job's latency is Job created → its
ProvisioningRequest created, plus request Provisioned → Workload Admitted; gantry-provisioner's part is
request created → Provisioned, which includes Gantry's scheduler placing the booking's Reservations (the
provisioner writes Provisioned once they are placed). Admissions/s is the Jobs admitted over first Job created → last
Admitted. Kueue runs with its shipped client limits, gantry-provisioner with its defaults
(`+"`--kube-api-qps 100 --kube-api-burst 200`"+`).

`, *commandFlag, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, time.Now().UTC().Format("2006-01-02"))
	if *noteFlag != "" {
		fmt.Fprintf(w, "%s\n\n", *noteFlag)
	}
	if len(adm) > 0 {
		writeAdmissionTable(w, adm)
	} else {
		fmt.Fprintln(w, "No run recorded.")
	}
	fmt.Fprintf(w, "\nBeside it: %s.\n", caPace)
	fmt.Fprint(w, `
## gantry-provisioner's decisions per second

BenchmarkCheckCapacityThroughput (autoscaler/provisioning/integration) runs the provisioner in-process on
etcd and Gantry's kube-apiserver, with Gantry's scheduler placing the bookings (its client limits raised),
on nodes of 32 CPUs. It creates the check-capacity requests of 10 one-CPU pods at once and times each
from the provisioner's first write to it (its finalizer: the first thing a request's first reconcile
does, so the wait in the work queue before it is left out, while the wait of the reconcile that confirms
the placed booking is in) to its Provisioned=True or Failed=True write. Decisions/s is the
requests decided over first finalizer → last decision. Target: 100 a second with the client limits
raised; the default limits beside it. The TemplatePerRequest runs give each request a PodTemplate of its
own, created just before it, as Kueue does. Workers is the provisioner's
`+"`--concurrent-provisioning-request-syncs`"+`. Booked pods not placed are those the scheduler did not
place although the simulation had found room for them
(`+"`gantry_provisioning_booked_pods_not_placed_total`"+` over the run). API writes a request are
kube-apiserver's writes over the run (its `+"`apiserver_request_total`"+` of POST, PUT, PATCH and
DELETE: the requests' creation, the provisioner, the scheduler, events), per request.

`)
	if len(thr) > 0 {
		writeThroughputTable(w, thr)
	} else {
		fmt.Fprintln(w, "No run recorded.")
	}
}
