#!/usr/bin/env bash
# Regenerates everything hack/verify.sh checks: the Kubernetes replace block,
# tidy modules, formatting, generated API code, CRD YAML and typed clients,
# scheduler plugin args code, the scheduler configurations of scheduler/profiles,
# README.md's make-target table and e2e label list, Bazel metadata.
set -euo pipefail
GANTRY_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "${GANTRY_ROOT}/hack/lib.sh"
cd "${GANTRY_ROOT}"

hack/pin-kubernetes.sh "$(gantry::k8s_version)"
for m in . hack/tools hack/tools/lint hack/tools/images hack/tools/node hack/tools/crictl hack/tools/kueue; do
  (cd "${m}" && go mod tidy)
done
gantry::generate_crds
gantry::generate_clients
gantry::generate_scheduler_config
# The scheduler configurations generated from scheduler/profiles/gantry.yaml.
go test ./scheduler/profiles -run TestGeneratedFilesAreCurrent -update >/dev/null
gofmt -s -w $(git ls-files -co --exclude-standard '*.go')
hack/update-docs.sh
hack/update-bazel.sh
