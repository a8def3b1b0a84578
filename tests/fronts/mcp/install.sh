#!/usr/bin/env bash
# npm ci of the MCP tests' one dependency (@modelcontextprotocol/sdk, pinned
# by package-lock.json), only when node_modules does not match the lockfile,
# so that a second run is offline. Run by ./scripts/build and run-tests.sh.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "tests/fronts/mcp: node and npm are needed (./scripts/install-deps installs them)" >&2
  exit 1
fi
stamp=node_modules/.sandboxd-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  npm ci --no-audit --no-fund --prefer-offline
  echo "$want" >"$stamp"
fi
