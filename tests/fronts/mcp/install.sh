#!/usr/bin/env bash
# npm ci of the MCP tests' dependencies (@modelcontextprotocol/sdk, the
# MCP Inspector @modelcontextprotocol/inspector and gpt-tokenizer, pinned by
# package-lock.json), only when node_modules does not match the lockfile,
# so that a second run is offline. Run by ./scripts/build and run-tests.sh.
set -euo pipefail
cd "$(dirname "$0")"
exec ../../../scripts/npm-ci .
