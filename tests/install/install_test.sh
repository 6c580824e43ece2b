#!/usr/bin/env bash
# Installs mitra from BUILD_DIR into a temporary prefix, builds a program outside the tree with
# find_package(mitra), runs it, and checks that it trained.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)/consumer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# Only the public API is installed, under the mitra/ prefix.
include=$tmp/prefix/include
for internal in mitra/worker/comm.h mitra/worker/checkpointer.h mitra/checkpoint/manifest.h \
                worker/trainer.h common/status.h; do
  if [ -e "$include/$internal" ]; then
    echo "install_test: $internal should not be installed" >&2
    exit 1
  fi
done
test -f "$include/mitra/worker/trainer.h"
cmake -S "$src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
out=$(CONSUMER_DIR=$tmp "$tmp/build/consumer" 2>&1)
echo "$out"
grep -q '"event":"stopped".*"step":3' <<<"$out"
# The evaluation after the last step and the model loaded back from its checkpoint agree.
eval_loss=$(grep -o '"event":"eval".*"loss":[-0-9.e]*' <<<"$out" | grep -o '[-0-9.e]*$')
printf -v rounded '%.6f' "$eval_loss"
grep -q "inference: step 3, loss $rounded" <<<"$out"
