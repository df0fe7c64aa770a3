#!/usr/bin/env bash
# Runs scheduler/bench's BenchmarkPreemptionClientQPS and
# BenchmarkPreemptionVictimDeleteFaults: upstream's DefaultPreemption against
# Gantry's AsyncPreemption, each with the scheduler's client at QPS 5000
# (scheduler_perf's) and at kube-scheduler's defaults (QPS 50, burst 100),
# and at the defaults with victim deletes failing for 10s, from one test
# binary. Prints pods/s, Gantry's ratio to upstream at the same limits,
# the scheduler's API calls per measured pod, and under faults the p99 time
# from a preemptor's first attempt to its binding and what it exceeds the
# preemptor's backoff by. COUNT repeats each, interleaved (figures are then
# means); the raw output and the schedulers' logs stay in
# _output/bench-preemption-qps/.
set -euo pipefail
GANTRY_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "${GANTRY_ROOT}"

if [[ ! -x _output/bin/etcd || ! -x _output/bin/kube-apiserver ]]; then
  echo "the benchmark starts etcd and kube-apiserver from _output/bin: run 'make build' first" >&2
  exit 1
fi
out="${GANTRY_ROOT}/_output/bench-preemption-qps"
mkdir -p "${out}"
count="${COUNT:-1}"
# The repetitions are interleaved as in hack/bench-scheduler.sh: the test
# binary runs every workload once, COUNT times over, so upstream's and
# Gantry's runs of one repetition are minutes apart, not a whole series.
rm -f "${out}/bench.txt"
echo "==> go test -c -tags scheduler_perf ./scheduler/bench"
go test -c -tags scheduler_perf -o "${out}/bench.test" ./scheduler/bench
for rep in $(seq "${count}"); do
  echo "==> repetition ${rep}/${count}: -bench 'BenchmarkPreemption(ClientQPS|VictimDeleteFaults)' (raw output: ${out}/bench.txt)"
  (cd scheduler/bench && PATH="${GANTRY_ROOT}/_output/bin:${PATH}" ARTIFACTS="${out}" "${out}/bench.test" -test.run '^$' \
    -test.bench 'BenchmarkPreemption(ClientQPS|VictimDeleteFaults)' -test.benchtime=1x -test.count=1 -test.timeout 90m) >>"${out}/bench.txt" 2>&1 || {
    tail -50 "${out}/bench.txt"
    exit 1
  }
done
rm -f "${out}/bench.test"

awk '
  $1 ~ /^BenchmarkPreemption(ClientQPS|VictimDeleteFaults)\// {
    name = $1; sub(/^BenchmarkPreemption(ClientQPS|VictimDeleteFaults)\//, "", name); sub(/-[0-9]+$/, "", name)
    for (i = 2; i < NF; i++) {
      if ($(i+1) == "pods/s") tput[name] += $i
      if ($(i+1) == "pod-patches/pod") patches[name] += $i
      if ($(i+1) == "victim-deletes/pod") deletes[name] += $i
      if ($(i+1) == "binds/pod") binds[name] += $i
      if ($(i+1) == "api-calls/pod") calls[name] += $i
      if ($(i+1) == "s-to-bind-p99") p99[name] += $i
      if ($(i+1) == "s-over-backoff-p99") over[name] += $i
    }
    runs[name]++
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  }
  END {
    printf "%-44s %9s %7s  %-48s %s\n", "workload", "pods/s", "ratio", "API calls per pod: all; patches deletes binds", "p99 s to bind (over backoff)"
    for (i = 1; i <= n; i++) {
      w = order[i]; r = runs[w]; split(w, p, "/")
      ratio = ""
      if (p[1] == "GantryPreemption") {
        base = "UpstreamPreemption/" p[2]
        if (base in tput && tput[base] > 0) ratio = sprintf("%.3f", (tput[w] / r) / (tput[base] / runs[base]))
      }
      lat = ""
      if (w in p99) lat = sprintf("%.2f (%+.2f)", p99[w] / r, over[w] / r)
      printf "%-44s %9.2f %7s  %-48s %s\n", w, tput[w] / r, ratio, sprintf("%.3f; %.3f %.3f %.3f", calls[w] / r, patches[w] / r, deletes[w] / r, binds[w] / r), lat
    }
  }' "${out}/bench.txt" | tee "${out}/table.txt"
