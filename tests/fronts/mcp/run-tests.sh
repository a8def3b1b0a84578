#!/usr/bin/env bash
# Runs one group of the MCP front's tests (GROUP.test.mjs) with node's test
# runner against the sandboxd and sandbox-mcp in BIN_DIR. ctest calls it
# (label "fronts"). node_modules comes from `npm ci` (scripts/build, or here
# when it is missing or does not match the lockfile). The tests start real
# servers and need root: without it, exit 77 (skipped), which CI refuses;
# "tools" (the tool list's size, from sandbox-mcp alone) runs as anyone.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: run-tests.sh BIN_DIR stdio|http|http_stream|example|inspector|tools" >&2
  exit 2
fi
bin_dir=$(cd "$1" && pwd)
group=$2
cd "$(dirname "$0")"
if [ "$group" != tools ] && [ "$(id -u)" -ne 0 ]; then
  echo "tests/fronts/mcp $group: skipped: sandboxd needs root" >&2
  exit 77
fi
./install.sh
if [ "$group" = example ]; then
  # The example's own dependencies, from its lockfile, as its user installs them.
  ../../../scripts/npm-ci ../../../examples/mcp
fi
export SANDBOXD_BIN_DIR="$bin_dir"
exec node --test --test-concurrency=1 "$group.test.mjs"
