#!/usr/bin/env bash
# Builds @sandboxd/client: `npm ci` from package-lock.json (only when
# node_modules does not match the lockfile, so a second build is offline),
# then `npm run build` (protoc-gen-es through buf into src/gen/, then tsc
# into dist/). Run by ./scripts/build and by the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
../../scripts/npm-ci .
npm run --silent build
