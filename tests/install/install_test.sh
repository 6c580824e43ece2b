#!/usr/bin/env bash
# Installs mitra from BUILD_DIR into a temporary prefix, builds a program outside the tree with
# find_package(mitra), runs it, and checks that it trained.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)/consumer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
out=$("$tmp/build/consumer" 2>&1)
echo "$out"
grep -q '"event":"stopped".*"step":3' <<<"$out"
