#!/usr/bin/env bash
# Runs scheduler/bench's BenchmarkPreemptionClientQPS: upstream's
# DefaultPreemption against Gantry's AsyncPreemption, each with the
# scheduler's client at QPS 5000 (scheduler_perf's) and at kube-scheduler's
# defaults (QPS 50, burst 100), in one go test invocation. Prints pods/s,
# Gantry's ratio to upstream at the same limits, and the scheduler's API
# calls per measured pod. COUNT repeats each (pods/s is then the mean); the
# raw output and the schedulers' logs stay in _output/bench-preemption-qps/.
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
echo "==> go test -tags scheduler_perf ./scheduler/bench -bench BenchmarkPreemptionClientQPS (raw output: ${out}/bench.txt)"
PATH="${GANTRY_ROOT}/_output/bin:${PATH}" ARTIFACTS="${out}" go test -tags scheduler_perf ./scheduler/bench -run '^$' \
  -bench 'BenchmarkPreemptionClientQPS' -benchtime=1x -count="${count}" -timeout 90m >"${out}/bench.txt" 2>&1 || {
  tail -50 "${out}/bench.txt"
  exit 1
}

awk '
  $1 ~ /^BenchmarkPreemptionClientQPS\// {
    name = $1; sub(/^BenchmarkPreemptionClientQPS\//, "", name); sub(/-[0-9]+$/, "", name)
    for (i = 2; i < NF; i++) {
      if ($(i+1) == "pods/s") tput[name] += $i
      if ($(i+1) == "pod-patches/pod") patches[name] += $i
      if ($(i+1) == "victim-deletes/pod") deletes[name] += $i
      if ($(i+1) == "binds/pod") binds[name] += $i
    }
    runs[name]++
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  }
  END {
    printf "%-32s %9s %7s  %s\n", "workload", "pods/s", "ratio", "API calls per pod: patches deletes binds"
    for (i = 1; i <= n; i++) {
      w = order[i]; r = runs[w]; split(w, p, "/")
      ratio = ""
      if (p[1] == "GantryPreemption") {
        base = "UpstreamPreemption/" p[2]
        if (base in tput && tput[base] > 0) ratio = sprintf("%.3f", (tput[w] / r) / (tput[base] / runs[base]))
      }
      printf "%-32s %9.2f %7s  %.3f %.3f %.3f\n", w, tput[w] / r, ratio, patches[w] / r, deletes[w] / r, binds[w] / r
    }
  }' "${out}/bench.txt" | tee "${out}/table.txt"
