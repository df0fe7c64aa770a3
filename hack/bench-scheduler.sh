#!/usr/bin/env bash
# Runs the scheduler benchmarks of scheduler/bench (`make bench-scheduler`),
# one harness or all of them, COUNT times, and reports them:
#
#   perf  upstream's scheduler_perf workloads (scheduler/bench/perf):
#         pods/s of Gantry's profile against upstream's default profile on
#         the same workload, and of Gantry with reservations against Gantry
#         without, with spreads and ratios (benchstat, and the tables of
#         docs/performance.md);
#   qps   preemption at the scheduler's client limits (scheduler/bench/qps):
#         upstream's DefaultPreemption against Gantry's AsyncPreemption at
#         QPS 5000 and at kube-scheduler's defaults (50/100), and at the
#         defaults with victim deletes failing for 10s; a table of pods/s,
#         Gantry's ratio to upstream, API calls per preemptor, and under
#         faults the p99 time to binding and what it exceeds the backoff by;
#   cost  what reservations cost each process (scheduler/bench/cost,
#         BenchmarkReservationCost): pods/s, CPU per pod of the scheduler,
#         kube-apiserver and etcd, status writes and their lag (benchstat).
#
# The repetitions are interleaved: a harness's test binary runs every
# selected benchmark once, COUNT times over, so the two sides of a ratio
# run minutes apart, not a whole series apart, and drift in the machine's
# speed over a long run falls on both alike. `make bench-scheduler` passes
# WHAT and COUNT; every other knob is an environment variable (make passes
# those given on its command line):
#
#   WHAT    perf, qps, cost, or all (qps, cost, then perf; default perf)
#   COUNT   repetitions (default 3)
#   BENCH   -bench regexp within the one harness of WHAT (not with all;
#           defaults: BenchmarkPerfScheduling,
#           'BenchmarkPreemption(ClientQPS|VictimDeleteFaults)',
#           BenchmarkReservationCost; e.g. WHAT=cost
#           BENCH=BenchmarkReservationStatusWrite)
#   LABELS  perf: scheduler_perf label filters, separated by spaces
#           (default "gantry", and with WHAT=all "gantry gantry-preemption";
#           "gantry-short" for quick local variants, "gantry-gang" for the
#           gang shapes (PodGroups, UpstreamGang and GantryGang, with and
#           without reservations) and "gantry-gang-short" for their quick
#           variants; the gang sets are in no default). A workload runs if it
#           matches any one of them; within one, commas mean "and", as in
#           scheduler_perf's -perf-scheduling-label-filter.
#   DOC=1   write docs/performance.md and docs/performance.png (WHAT=perf
#           or all) rather than $OUT/performance.{md,png}; with WHAT=perf
#           the page also takes in the qps and cost results left in $OUT
#           by earlier runs
#   KEEP=1  add this run's repetitions to the results of the last run of
#           the same harness (run the same benchmarks) instead of starting
#           afresh
#   OUT     output directory (default _output/bench-scheduler): a
#           subdirectory per harness (perf/, qps/, cost/) with its raw
#           output (bench.txt) and records, and the report (benchstat.txt,
#           machine.txt, performance.md) at the top
#   PROFILE=1  profiles of every benchmark's measured part into the
#           harness's directory: perf, CPU, allocation and lock contention
#           of the process; cost, CPU of the process and of kube-apiserver,
#           and kube-apiserver's allocations (benchutil.StartProfiles)
#   COUNTERS=1 perf: the scheduler's attempt, preemption and queue
#           counters, kube-apiserver's request counts and the
#           FailedScheduling messages of every workload's measured part,
#           into perf/counters.jsonl (benchutil.WatchCounters)
#   TRACE=1 perf: every pod's creation and binding times (as a pod watch
#           sees them), its namespace and whether it was bound into a
#           reservation, into perf/pods.csv (benchutil.TracePods)
#
# Every perf workload also records its CPU use (perf/cpu.jsonl) and, with
# reservations, their use (perf/reservations.jsonl); the schedulers of qps
# and cost log into scheduler.log.
set -euo pipefail
GANTRY_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "${GANTRY_ROOT}/hack/lib.sh"
cd "${GANTRY_ROOT}"

what="${WHAT:-perf}"
count="${COUNT:-3}"
case "${what}" in
  perf | qps | cost) harnesses=("${what}") ;;
  all) harnesses=(qps cost perf) ;;
  *) echo "WHAT=${what}: want perf, qps, cost or all" >&2; exit 1 ;;
esac
if [[ "${what}" == all && -n "${BENCH:-}" ]]; then
  echo "BENCH selects within one harness: give WHAT=perf, qps or cost with it" >&2
  exit 1
fi
if [[ -n "${DOC:-}" && "${what}" != perf && "${what}" != all ]]; then
  echo "DOC=1 makes the page from a perf run: give WHAT=perf or WHAT=all with it" >&2
  exit 1
fi
if [[ ! -x _output/bin/etcd || ! -x _output/bin/kube-apiserver ]]; then
  echo "the benchmarks start etcd (and kube-apiserver) from _output/bin: run 'make build' first" >&2
  exit 1
fi
out="${OUT:-_output/bench-scheduler}"
[[ "${out}" == /* ]] || out="${GANTRY_ROOT}/${out}"
labels="${LABELS:-gantry}"
if [[ "${what}" == all ]]; then
  labels="${LABELS:-gantry gantry-preemption}"
fi
export PATH="${GANTRY_ROOT}/_output/bin:${PATH}"
perf() { go tool -modfile="${GANTRY_ROOT}/hack/tools/perf/go.mod" "$@"; }
report() { (cd "${GANTRY_ROOT}/hack/tools/perf" && go run ./perfreport "$@"); }

# run_harness <harness> <-bench regexp> <go test flags...> runs the
# harness's benchmarks COUNT times, once per label filter for perf, into
# $out/<harness>/bench.txt.
run_harness() {
  local h="$1" bench="$2"
  shift 2
  local dir="${out}/${h}"
  # Data items and records of an earlier run would be read as this run's;
  # KEEP=1 adds this run's repetitions to them.
  [[ -n "${KEEP:-}" ]] || rm -rf "${dir}"
  mkdir -p "${dir}"
  local filters=(-)
  if [[ "${h}" == perf ]]; then
    read -ra filters <<<"${labels}"
  fi
  echo "==> go test -c -tags scheduler_perf ./scheduler/bench/${h}"
  go test -c -tags scheduler_perf -o "${dir}/bench.test" "./scheduler/bench/${h}"
  for rep in $(seq "${count}"); do
    for filter in "${filters[@]}"; do
      local args=("$@") selection="-bench '${bench}'"
      if [[ "${filter}" != - ]]; then
        args+=(-perf-scheduling-label-filter="${filter}")
        selection+=", labels ${filter}"
      fi
      echo "==> ${h}: repetition ${rep}/${count}: ${selection} (raw output: ${dir}/bench.txt)"
      # perf reads its testdata relative to the package directory.
      (cd "scheduler/bench/${h}" && ARTIFACTS="${dir}" "${dir}/bench.test" -test.run '^$' -test.bench "${bench}" \
        -test.count=1 "${args[@]}") >"${dir}/rep.txt" 2>&1 || {
        cat "${dir}/rep.txt" >>"${dir}/bench.txt"
        tail -50 "${dir}/rep.txt"
        exit 1
      }
      cat "${dir}/rep.txt" >>"${dir}/bench.txt"
      # A selection that runs nothing passes: say so rather than report an empty table.
      if ! grep -qE '^Benchmark[^[:space:]]+[[:space:]]+[0-9]+[[:space:]]' "${dir}/rep.txt"; then
        echo "${h}: ${selection} ran no benchmark (see ${dir}/bench.txt)" >&2
        exit 1
      fi
    done
  done
  rm -f "${dir}/rep.txt" "${dir}/bench.test"
}

# qps_table prints the qps results as a table (means over the repetitions).
qps_table() {
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
    }' "$1"
}

start=$(date +%s)
for h in "${harnesses[@]}"; do
  case "${h}" in
    qps)
      run_harness qps "${BENCH:-BenchmarkPreemption(ClientQPS|VictimDeleteFaults)}" -test.benchtime=1x -test.timeout 90m
      qps_table "${out}/qps/bench.txt" | tee "${out}/qps/table.txt"
      ;;
    cost)
      [[ -z "${PROFILE:-}" ]] || export GANTRY_BENCH_PROFILE_DIR="${out}/cost"
      run_harness cost "${BENCH:-BenchmarkReservationCost}" -test.benchtime=1ns -test.timeout 300m
      grep -E '^Benchmark[^[:space:]]+[[:space:]]+[0-9]+[[:space:]]' "${out}/cost/bench.txt"
      unset GANTRY_BENCH_PROFILE_DIR
      ;;
    perf)
      [[ -z "${PROFILE:-}" ]] || export GANTRY_BENCH_PROFILE_DIR="${out}/perf"
      [[ -z "${COUNTERS:-}" ]] || export GANTRY_BENCH_COUNTERS=1
      [[ -z "${TRACE:-}" ]] || export GANTRY_BENCH_TRACE=1
      run_harness perf "${BENCH:-BenchmarkPerfScheduling}" -test.benchtime=1ns -test.timeout 300m \
        -data-items-dir="${out}/perf"
      unset GANTRY_BENCH_PROFILE_DIR GANTRY_BENCH_COUNTERS GANTRY_BENCH_TRACE
      ;;
  esac
done
echo "==> $(( $(date +%s) - start ))s"

# The report: benchstat over this run's perf and cost results, and with
# DOC=1 over those of earlier qps and cost runs too; the page when perf ran.
benches=()
for h in qps cost perf; do
  f="${out}/${h}/bench.txt"
  if [[ -s "${f}" && ( " ${harnesses[*]} " == *" ${h} "* || -n "${DOC:-}" ) ]]; then
    benches+=(-bench "${f}")
  fi
done
if [[ "${what}" == qps ]]; then
  exit 0
fi
rm -f "${out}/benchstat.txt"
for set in profiles reservations; do
  report benchstat -set "${set}" "${benches[@]}" >"${out}/benchstat-${set}.in"
  if [[ -s "${out}/benchstat-${set}.in" ]]; then
    col=/profile
    [[ "${set}" == reservations ]] && col=/reservations
    perf benchstat -col "${col}" "${out}/benchstat-${set}.in" | tee -a "${out}/benchstat.txt"
    echo | tee -a "${out}/benchstat.txt"
  fi
done
if [[ "${what}" == cost ]]; then
  exit 0
fi

{
  echo "$(go env GOOS)/$(go env GOARCH), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "$(go version | cut -d' ' -f3-), k8s.io/kubernetes $(go list -m -f '{{.Version}}' k8s.io/kubernetes), Gantry $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
  echo "run on $(date -u +%Y-%m-%dT%H:%MZ): WHAT=${what}${BENCH:+ BENCH='${BENCH}'} LABELS='${labels}' COUNT=${count}${KEEP:+ added to those of an earlier run}, $(( $(date +%s) - start ))s"
} >"${out}/machine.txt"

doc="${out}/performance.md" png="${out}/performance.png"
if [[ -n "${DOC:-}" ]]; then
  doc="${GANTRY_ROOT}/docs/performance.md" png="${GANTRY_ROOT}/docs/performance.png"
fi
# perfreport names on the page the commands that regenerate it, from what
# this run was asked for and the results it reads.
report doc "${benches[@]}" -items "${out}/perf" -benchstat "${out}/benchstat.txt" -machine "${out}/machine.txt" \
  -what "${what}" -count "${count}" -select "${BENCH:-}" -labels "${LABELS:-}" ${KEEP:+-keep} \
  -kubernetes "$(gantry::k8s_version)" -out "${doc}" -png "${png}"
sed -n '/^## Upstream/,/^## benchstat/p' "${doc}" | sed '$d'
echo "==> ${doc}, ${png}"
