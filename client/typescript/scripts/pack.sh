#!/usr/bin/env bash
# pack.sh VERSION OUT_DIR: the release tarball of @sandboxd/client,
# OUT_DIR/sandboxd-client-VERSION.tgz, made by `npm pack` from the build's
# dist/src (scripts/build.sh makes it) and this folder's package.json with
# its version set to VERSION. VERSION is CMake's PROJECT_VERSION (the
# client_ts_tarball target and the client_ts_package test pass it), the one
# version of the project: the package.json in git carries a placeholder and
# is never edited here. The copy that is packed drops the scripts and the
# devDependencies (they only build the client). Must never touch the source
# tree or pack a missing or partial build; idempotent (the tarball is
# replaced whole).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: pack.sh VERSION OUT_DIR" >&2
  exit 2
fi
version=$1
out_dir=$2
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "pack.sh: version '$version' is not x.y.z (CMake's project(sandboxd VERSION ...))" >&2
  exit 2
fi
src=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$src/dist/src/index.js" ] || [ ! -f "$src/dist/src/index.d.ts" ]; then
  echo "pack.sh: $src/dist/src has no index.js and index.d.ts: run ./scripts/build (client/typescript/scripts/build.sh) first" >&2
  exit 1
fi
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/dist"
cp -r "$src/dist/src" "$stage/dist/src"
cp "$src/README.md" "$stage/"
node - "$src/package.json" "$stage/package.json" "$version" <<'EOF'
const fs = require("node:fs");
const [from, to, version] = process.argv.slice(2);
const pkg = JSON.parse(fs.readFileSync(from, "utf8"));
pkg.version = version;
delete pkg.scripts;
delete pkg.devDependencies;
fs.writeFileSync(to, JSON.stringify(pkg, null, 2) + "\n");
EOF
name=sandboxd-client-$version.tgz
# npm pack writes the tarball under its own name; it goes to a temp dir
# first, so OUT_DIR never holds half a tarball.
packed=$(cd "$stage" && npm pack --silent --pack-destination "$stage" .)
if [ "$packed" != "$name" ]; then
  echo "pack.sh: npm pack made '$packed', expected $name" >&2
  exit 1
fi
mv -f "$stage/$name" "$out_dir/$name"
echo "$out_dir/$name"
