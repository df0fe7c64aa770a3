#!/usr/bin/env bash
# Runs Gantry's scheduler_perf workloads (scheduler/bench) in one go test
# invocation and prints pods/s per workload with ratios:
#   Gantry profile vs upstream's default profile (same workload), and
#   Gantry with reservations vs Gantry without (same node count).
# BENCH selects workloads (a -bench regexp), COUNT repeats each (pods/s is
# then the mean); the raw output stays in _output/bench-scheduler/.
set -euo pipefail
GANTRY_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "${GANTRY_ROOT}"

if [[ ! -x _output/bin/etcd ]]; then
  echo "scheduler_perf starts etcd from PATH: run 'make build' first" >&2
  exit 1
fi
out="${GANTRY_ROOT}/_output/bench-scheduler"
mkdir -p "${out}"
export PATH="${GANTRY_ROOT}/_output/bin:${PATH}" ARTIFACTS="${out}"
bench="${BENCH:-BenchmarkPerfScheduling/(Upstream|Gantry)/}"
labels="${LABELS:-gantry}" # gantry-preemption selects the preemption workloads
count="${COUNT:-1}"

echo "==> go test -tags scheduler_perf ./scheduler/bench -bench '${bench}' (raw output: ${out}/bench.txt)"
go test -tags scheduler_perf ./scheduler/bench -run '^$' -bench "${bench}" -benchtime=1ns -count="${count}" -timeout 90m \
  -args -perf-scheduling-label-filter="${labels}" -data-items-dir="${out}" >"${out}/bench.txt" 2>&1 || {
  tail -50 "${out}/bench.txt"
  exit 1
}

awk '
  $1 ~ /^BenchmarkPerfScheduling\// {
    name = $1; sub(/^BenchmarkPerfScheduling\//, "", name); sub(/-[0-9]+$/, "", name)
    for (i = 2; i < NF; i++) if ($(i+1) == "SchedulingThroughput/Average") { sum[name] += $i; runs[name]++ }
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  }
  END {
    for (w in sum) tput[w] = sum[w] / runs[w]
    printf "%-40s %12s %10s  %s\n", "workload", "pods/s", "ratio", "against"
    for (i = 1; i <= n; i++) {
      w = order[i]; split(w, p, "/"); prof = p[1]; wl = p[2]
      base = ""; ratio = ""
      if (prof == "GantryPreemption") {
        base = "UpstreamPreemption/" wl
        if (base in tput && tput[base] > 0) ratio = sprintf("%.3f", tput[w] / tput[base])
      }
      if (prof == "Gantry") {
        if (wl ~ /_[0-9]+Reservations$/) { b = wl; sub(/_[0-9]+Reservations$/, "", b); base = "Gantry/" b }
        else base = "Upstream/" wl
        if (base in tput && tput[base] > 0) ratio = sprintf("%.3f", tput[w] / tput[base])
      }
      printf "%-40s %12.1f %10s  %s\n", w, tput[w], ratio, base
    }
  }' "${out}/bench.txt" | tee "${out}/table.txt"
