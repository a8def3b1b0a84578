#!/usr/bin/env bash
# Builds @sandboxd/client: `npm ci` from package-lock.json (only when
# node_modules does not match the lockfile, so a second build is offline),
# then `npm run build` (protoc-gen-es through buf into src/gen/, then tsc
# into dist/). Run by ./scripts/build and by the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "client/typescript: node and npm are needed (./scripts/install-deps installs them)" >&2
  exit 1
fi
stamp=node_modules/.sandboxd-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  npm ci --no-audit --no-fund --prefer-offline
  echo "$want" >"$stamp"
fi
npm run --silent build
