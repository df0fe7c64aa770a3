#!/usr/bin/env bash
# Runs upstream's own k8s.io/kubernetes/pkg/apis/core/validation tests against
# the patched package twice: with the hooks at their upstream defaults, and
# with Gantry's narrowing installed. Prints every test case whose outcome
# differs: the cases whose expectation Gantry changes. Only true narrowings of
# gated pods may appear.
#
#   hack/upstream-validation-tests.sh [go test -run regexp]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}"
hack/patch-kubernetes.sh >/dev/null

run="${1:-.}"
pkg_dir="${root}/_output/patched/kubernetes/pkg/apis/core/validation"
installer="${pkg_dir}/zz_gantry_narrowing_test.go"
# Our own test file, dropped into the materialized tree only: it installs the
# narrowing hooks when GANTRY_NARROWING is set.
cat >"${installer}" <<'GO'
package validation

import (
	"os"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/apis/core"

	"github.com/gantry-dev/gantry/apiserver-patches/narrowing"
)

func init() {
	if os.Getenv("GANTRY_NARROWING") != "" {
		ValidateGatedNodeAffinityMutation = narrowing.ValidateNodeAffinityMutation
		ValidatePodTolerationsUpdate = narrowing.TolerationsUpdate(ValidatePodTolerationsUpdate, func(t []core.Toleration, p *field.Path, opts PodValidationOptions) field.ErrorList {
			return ValidateTolerations(t, p, opts, KeyFormatCovered)
		})
	}
}
GO
trap 'rm -f "${installer}"' EXIT

tmp="$(mktemp -d)"
test_args=(-modfile="${root}/_output/patched/go.mod" -count=1 -json -run "${run}" k8s.io/kubernetes/pkg/apis/core/validation)
failed_tests() { # go test -json on stdin -> names of failing tests
  sed -n 's/.*"Action":"fail".*"Test":"\([^"]*\)".*/\1/p' | sort -u
}
echo "==> upstream tests, hooks at upstream's defaults" >&2
go test "${test_args[@]}" >"${tmp}/upstream.json" || true
echo "==> upstream tests, Gantry narrowing installed" >&2
GANTRY_NARROWING=1 go test "${test_args[@]}" >"${tmp}/gantry.json" || true

total="$(grep -c '"Action":"pass".*"Test"' "${tmp}/upstream.json" || true)"
failed_tests <"${tmp}/upstream.json" >"${tmp}/upstream.fail"
failed_tests <"${tmp}/gantry.json" >"${tmp}/gantry.fail"
if [[ -s "${tmp}/upstream.fail" ]]; then
  echo "upstream's tests fail even with the hooks at their defaults (the patch changed behaviour):" >&2
  cat "${tmp}/upstream.fail" >&2
  exit 1
fi
echo "${total} upstream test cases pass with the hooks at their defaults."
echo "Cases whose outcome changes with Gantry's narrowing installed:"
# Print only the leaves: a parent test fails whenever a subtest does.
awk 'NR==FNR { all[$0]=1; next } { for (t in all) if (index(t, $0 "/") == 1) next; print "  " $0 }' \
  "${tmp}/gantry.fail" "${tmp}/gantry.fail"
# Table tests that loop without t.Run report each case in its error line:
# show the first line of every error the failing tests logged.
echo "Their failures (unexpected valid: upstream rejects, Gantry accepts; unexpected invalid: the reverse;"
echo "unexpected error message: both reject, with different messages):"
sed -n 's/.*"Output":"    [a-z_]*_test\.go:[0-9]*: \(unexpected [^"]*\)".*/\1/p' "${tmp}/gantry.json" |
  sed -e 's/\\nExpected error: /\n      expected: /' -e 's/\\nActual error: /\n      actual:   /' -e 's/\\n.*//' |
  sed 's/^/  /'
rm -rf "${tmp}"
