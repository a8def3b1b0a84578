#!/usr/bin/env bash
# Runs one group of the TypeScript client's tests (test/GROUP.test.ts, as
# compiled into dist/ by scripts/build.sh) with node's test runner, against
# the sandboxd in BIN_DIR. ctest calls it (label "clients"). Every group but
# "unit" starts real servers and needs root: without it, exit 77 (skipped),
# which CI refuses.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: run-tests.sh BIN_DIR unit|methods|faults|fleet|tls|stream|interpreter|tenants|egress" >&2
  exit 2
fi
bin_dir=$(cd "$1" && pwd)
group=$2
cd "$(dirname "$0")/.."
if [ "$group" != unit ] && [ "$(id -u)" -ne 0 ]; then
  echo "client/typescript $group: skipped: sandboxd needs root" >&2
  exit 77
fi
test_file="dist/test/$group.test.js"
if [ ! -f "$test_file" ] || [ ! -d node_modules ]; then
  echo "client/typescript: $test_file missing: run ./scripts/build (npm ci, generate, tsc) first" >&2
  exit 1
fi
export SANDBOXD_BIN_DIR="$bin_dir"
exec node --test "$test_file"
