#!/usr/bin/env bash
# Shows that the soak test's invariant checker catches what it claims: for
# each family of internal/plant, builds every binary with that family's
# planted bug (build tag gantry_plant_<family>) into
# _output/plant/<family>/bin, runs the soak on them, and passes only when the
# run failed and its report names a violation of the family. Run by
# `make soak-plants`; on demand only (each family is a soak run).
#
#   PLANTS     families to run (default: all of internal/plant)
#   DURATION   each run's working time, in minutes (default 6m; the leak
#              family's run takes 8m at least)
#   SEED       seed of every run (default 0: a new one each)
#   FAULT_INTERVAL  mean time between faults (default 30s; 4m for leak)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
plants="${PLANTS:-reservation quota provisioningrequest scaledown preemption metadatapolicy leak}"
duration="${DURATION:-6m}"
seed="${SEED:-0}"
interval="${FAULT_INTERVAL:-30s}"
[[ "${duration}" =~ ^[0-9]+m$ ]] || { echo "DURATION=${duration}: want whole minutes, e.g. 6m" >&2; exit 2; }

# family is the invariant family that must name a plant's bug
# (internal/plant Families).
family() {
  case "$1" in
    reservation) echo Reservation ;; quota) echo Quota ;; provisioningrequest) echo ProvisioningRequest ;;
    scaledown) echo ScaleDown ;; preemption) echo Preemption ;; metadatapolicy) echo MetadataPolicy ;; leak) echo Leak ;;
    *) echo "unknown plant $1 (want one of internal/plant Families)" >&2; return 1 ;;
  esac
}

declare -A verdict
failed=0
for p in ${plants}; do
  fam="$(family "${p}")"
  bin="${root}/_output/plant/${p}/bin"
  artifacts="${root}/_output/e2e-artifacts-soak-plant-${p}"
  echo "==> ${p}: building with gantry_plant_${p} into ${bin}"
  GANTRY_BIN_DIR="${bin}" GANTRY_BUILD_TAGS="gantry_plant_${p}" hack/build.sh
  GANTRY_BIN_DIR="${bin}" GANTRY_BUILD_SET=kueue hack/build.sh # the soak's Kueue, no plant in it
  rm -rf "${artifacts}" && mkdir -p "${artifacts}"
  # The suite reuses a soak cluster that still runs (one a killed run left),
  # whatever binaries it runs: remove it, so that this run's are the plant's.
  "${bin}/gantry-cluster" down --name soak --workdir "${root}/_output/cluster-soak" --kubeconfig "${root}/_output/kubeconfig-soak"
  d="${duration}" i="${interval}"
  if [[ "${p}" == leak && -z "${FAULT_INTERVAL:-}" ]]; then
    # The Leak family judges a process lifetime that holds a warm-up and
    # two windows (4 minutes): faults every 30 s over five kinds would
    # restart gantry-provisioner before that.
    d="$(( ${duration%m} > 8 ? ${duration%m} : 8 ))m" i=4m
  fi
  echo "==> ${p}: soak of ${d}, a fault about every ${i}; it must fail naming ${fam}"
  rc=0
  go tool ginkgo -v --tags soak --timeout=2h --output-dir="${artifacts}" ./e2e/soak -- \
    --artifacts="${artifacts}" --runtime=local --bin-dir="${bin}" \
    --soak-duration="${d}" --soak-seed="${seed}" --soak-fault-interval="${i}" \
    >"${artifacts}/soak.log" 2>&1 || rc=$?
  report="${artifacts}/soak-report.json"
  named=0
  [[ -f "${report}" ]] && named="$(grep -cE "\"family\": *\"${fam}\"|\"Family\": *\"${fam}\"" "${report}" || true)"
  if ((rc != 0 && named > 0)); then
    verdict[${p}]="caught: the run failed (exit ${rc}) with ${named} ${fam} violation(s)"
    grep -E "VIOLATION \[${fam}/" "${artifacts}/soak.log" | head -3 || true
  else
    verdict[${p}]="NOT caught: exit ${rc}, ${named} ${fam} violation(s) in ${report} (log: ${artifacts}/soak.log)"
    failed=1
  fi
  echo "==> ${p}: ${verdict[${p}]}"
done
echo
for p in ${plants}; do printf '%-20s %s\n' "${p}" "${verdict[${p}]}"; done
exit "${failed}"
