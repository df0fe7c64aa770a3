#!/usr/bin/env bash
# Runs Gantry's scheduler_perf workloads (scheduler/bench) COUNT times and
# reports pods/s with spreads and ratios: Gantry's profile against
# upstream's default profile on the same workload, and Gantry with
# reservations against Gantry without (benchstat, and the tables of
# docs/performance.md). The repetitions are interleaved: the test binary
# runs every selected workload once, COUNT times over, so the two sides of
# a ratio run minutes apart, not a whole series apart, and drift in the
# machine's speed over a long run falls on both alike.
#
#   BENCH   -bench regexp (default: every BenchmarkPerfScheduling workload)
#   LABELS  scheduler_perf label filters, separated by spaces (default
#           "gantry"; "gantry-short" for quick local variants, "gantry
#           gantry-preemption" adds preemption). A workload runs if it
#           matches any one of them; within one, commas mean "and", as in
#           scheduler_perf's -perf-scheduling-label-filter.
#   COUNT   repetitions (default 3)
#   KEEP=1  keep the raw output and data items of the last run and add this
#           run's repetitions to them (run the same workloads)
#   DOC=1   also write docs/performance.md and docs/performance.png, taking
#           in _output/bench-preemption-qps/bench.txt and
#           _output/bench-reservation-cost/bench.txt if they are there
#   OUT     output directory (default _output/bench-scheduler;
#           make bench-reservation-cost uses _output/bench-reservation-cost)
#   PROFILE=1  CPU, allocation and lock contention profiles of every
#           workload's measured part into the output directory (see
#           profileRest in scheduler/bench); for BenchmarkReservationCost,
#           CPU profiles of this process and of kube-apiserver (profileCost)
#   COUNTERS=1 the scheduler's attempt, preemption and queue counters,
#           kube-apiserver's request counts and the FailedScheduling
#           messages of every workload's measured part, into counters.jsonl
#           in the output directory (see watchCounters in scheduler/bench)
#   TRACE=1 every pod's creation and binding times (as a pod watch sees
#           them), its namespace and whether it was bound into a
#           reservation, into pods.csv in the output directory (see
#           tracePods in scheduler/bench)
#
# Raw output, data items and benchstat input stay in $OUT.
set -euo pipefail
GANTRY_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "${GANTRY_ROOT}"

if [[ ! -x _output/bin/etcd ]]; then
  echo "scheduler_perf starts etcd from PATH: run 'make build' first" >&2
  exit 1
fi
out="${OUT:-_output/bench-scheduler}"
[[ "${out}" == /* ]] || out="${GANTRY_ROOT}/${out}"
# Data items of an earlier run would be read as this run's; KEEP=1 adds
# this run's repetitions to them (the same workloads, from the same source).
if [[ -z "${KEEP:-}" ]]; then
  rm -rf "${out}"
fi
mkdir -p "${out}"
export PATH="${GANTRY_ROOT}/_output/bin:${PATH}" ARTIFACTS="${out}"
if [[ -n "${PROFILE:-}" ]]; then
  export GANTRY_BENCH_PROFILE_DIR="${out}"
fi
if [[ -n "${COUNTERS:-}" ]]; then
  export GANTRY_BENCH_COUNTERS=1
fi
if [[ -n "${TRACE:-}" ]]; then
  export GANTRY_BENCH_TRACE=1
fi
bench="${BENCH:-BenchmarkPerfScheduling}"
labels="${LABELS:-gantry}"
count="${COUNT:-3}"
perf() { go tool -modfile="${GANTRY_ROOT}/hack/tools/perf/go.mod" "$@"; }
report() { (cd "${GANTRY_ROOT}/hack/tools/perf" && go run ./perfreport "$@"); }

start=$(date +%s)
echo "==> go test -c -tags scheduler_perf ./scheduler/bench"
go test -c -tags scheduler_perf -o "${out}/bench.test" ./scheduler/bench
for rep in $(seq "${count}"); do
  for filter in ${labels}; do
    echo "==> repetition ${rep}/${count}: -bench '${bench}', labels ${filter} (raw output: ${out}/bench.txt)"
    # The harness reads its testdata relative to the package directory.
    (cd scheduler/bench && "${out}/bench.test" -test.run '^$' -test.bench "${bench}" -test.benchtime=1ns -test.count=1 \
      -test.timeout 300m -perf-scheduling-label-filter="${filter}" -data-items-dir="${out}") >"${out}/rep.txt" 2>&1 || {
      cat "${out}/rep.txt" >>"${out}/bench.txt"
      tail -50 "${out}/rep.txt"
      exit 1
    }
    cat "${out}/rep.txt" >>"${out}/bench.txt"
    # A filter that selects nothing passes: say so rather than report an empty table.
    if ! grep -qE '^Benchmark[^[:space:]]+[[:space:]]+[0-9]+[[:space:]]' "${out}/rep.txt"; then
      echo "-bench '${bench}' with labels '${filter}' ran no workload (see ${out}/bench.txt)" >&2
      exit 1
    fi
  done
done
rm -f "${out}/rep.txt"
rm -f "${out}/bench.test"
echo "==> $(( $(date +%s) - start ))s"

benches=(-bench "${out}/bench.txt")
qps="${GANTRY_ROOT}/_output/bench-preemption-qps/bench.txt"
cost="${GANTRY_ROOT}/_output/bench-reservation-cost/bench.txt"
for f in "${qps}" "${cost}"; do
  if [[ -n "${DOC:-}" && -s "${f}" && "${f}" != "${out}/bench.txt" ]]; then
    benches+=(-bench "${f}")
  fi
done
for set in profiles reservations; do
  report benchstat -set "${set}" "${benches[@]}" >"${out}/benchstat-${set}.in"
  if [[ -s "${out}/benchstat-${set}.in" ]]; then
    col=/profile
    [[ "${set}" == reservations ]] && col=/reservations
    perf benchstat -col "${col}" "${out}/benchstat-${set}.in" | tee -a "${out}/benchstat.txt"
    echo | tee -a "${out}/benchstat.txt"
  fi
done

{
  echo "$(go env GOOS)/$(go env GOARCH), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "$(go version | cut -d' ' -f3-), k8s.io/kubernetes $(go list -m -f '{{.Version}}' k8s.io/kubernetes), Gantry $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
  echo "run on $(date -u +%Y-%m-%dT%H:%MZ): BENCH='${bench}' LABELS='${labels}' COUNT=${count}${KEEP:+ added to those of an earlier run}, $(( $(date +%s) - start ))s"
} >"${out}/machine.txt"

doc="${out}/performance.md" png="${out}/performance.png"
if [[ -n "${DOC:-}" ]]; then
  doc="${GANTRY_ROOT}/docs/performance.md" png="${GANTRY_ROOT}/docs/performance.png"
fi
# The page names the commands that made it: a subset says which.
commands=(-command "make bench-scheduler-doc COUNT=${count}")
if [[ -n "${BENCH:-}" || "${labels}" != "gantry gantry-preemption" ]]; then
  commands=()
  if [[ -n "${DOC:-}" && -s "${qps}" ]]; then
    commands+=(-command "make bench-preemption-qps COUNT=$(grep -cE '^BenchmarkPreemptionClientQPS/UpstreamPreemption/QPS50-' "${qps}")")
  fi
  if [[ -n "${DOC:-}" && -s "${cost}" && "${cost}" != "${out}/bench.txt" ]]; then
    commands+=(-command "make bench-reservation-cost COUNT=$(grep -cE '^BenchmarkReservationCost/Gantry/[^ ]*_[0-9]+Reservations-' "${cost}")")
  fi
  commands+=(-command "COUNT=${count}${KEEP:+ KEEP=1} DOC=1 BENCH='${bench}' LABELS='${labels}' hack/bench-scheduler.sh"
    -command "# Everything (every workload, hours at COUNT=3 on 2 cores): make bench-scheduler-doc COUNT=3")
fi
report doc "${benches[@]}" -items "${out}" -benchstat "${out}/benchstat.txt" -machine "${out}/machine.txt" \
  "${commands[@]}" -out "${doc}" -png "${png}"
sed -n '/^## Upstream/,/^## benchstat/p' "${doc}" | sed '$d'
echo "==> ${doc}, ${png}"
