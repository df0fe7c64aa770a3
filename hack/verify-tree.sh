#!/usr/bin/env bash
# Fails when the tree holds build output: a binary file (git's own test: the
# content has NUL bytes), or a file larger than 1 MiB that is not one of the
# named generated files below. Tracked and untracked-but-not-ignored files are
# checked, so a `git add -A` cannot slip a test binary or a profile in.
#
# Allowed binaries: images under docs/ (plots and diagrams the docs show).
# Allowed large files: the generated CRD YAML and deepcopy code.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=$((1024 * 1024))
binary_ok='^docs/.*\.(png|svg)$'
large_ok='^crds/manifests/[^/]+\.yaml$|(^|/)zz_generated\.[a-z_]+\.go$'

bad=()
# --eol prints "i/<index attr> w/<worktree attr> attr/... <path>"; -text marks binary content.
while IFS=$'\t' read -r info path; do
  [[ -e "${path}" ]] || continue # deleted in the work tree
  if [[ "${info}" == *"/-text"* ]] && ! [[ "${path}" =~ ${binary_ok} ]]; then
    bad+=("${path}: binary ($(file -b "${path}" 2>/dev/null | cut -c1-60 || echo 'NUL bytes'))")
    continue
  fi
  size=$(stat -c %s "${path}")
  if ((size > limit)) && ! [[ "${path}" =~ ${large_ok} ]]; then
    bad+=("${path}: ${size} bytes, over 1 MiB and not a named generated file")
  fi
done < <(git ls-files --eol -co --exclude-standard)

if ((${#bad[@]})); then
  printf 'build output or oversized files in the tree (remove with git rm --cached, ignore in .gitignore):\n'
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
