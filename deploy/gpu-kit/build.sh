#!/usr/bin/env bash
# Builds the GPU capture kit (README "GPU capture kit"): one folder and its
# .tar.gz, under 64 MiB (what can be brought to a GPU node), holding
#   bin/rankscope-agent bin/rankscope   stripped
#   wheels/rankscope-*.whl              the Python package, abi3 (CPython >= 3.9)
#   workloads/ddp_gpu.py                the training job (plain torch)
#   capture.sh KIT_VERSION
# Usage: build.sh [--debug] KIT_DIR VENV
#   --debug: the debug binaries and a debug wheel (quick; for the tests and a
#   CPU capture here); without it release builds (`make gpu-kit`).
set -euo pipefail
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
KIT=${1:?usage: build.sh [--debug] KIT_DIR VENV}
mkdir -p "$(dirname "$KIT")"; KIT=$(cd "$(dirname "$KIT")" && pwd)/$(basename "$KIT")
VENV=${2:?usage: build.sh [--debug] KIT_DIR VENV}
CARGO=${CARGO:-cargo}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIMIT=$((64 * 1024 * 1024))
cd "$ROOT"

flag=(); [ $profile = release ] && flag=(--release)
"$CARGO" build "${flag[@]}" --locked -p rankscope-agent -p rankscope-cli --bin rankscope-agent --bin rankscope
rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/wheels" "$KIT/workloads"
for b in rankscope-agent rankscope; do
    cp "target/$profile/$b" "$KIT/bin/$b"
    strip "$KIT/bin/$b"
done
(cd python && VIRTUAL_ENV=$VENV PATH=$VENV/bin:$PATH maturin build "${flag[@]}" --locked -q -o "$KIT/wheels")
ls "$KIT"/wheels/rankscope-*abi3*.whl >/dev/null || { echo "build.sh: no abi3 wheel was built" >&2; exit 1; }
cp deploy/gpu-kit/workloads/*.py "$KIT/workloads/"
cp deploy/gpu-kit/capture.sh "$KIT/capture.sh"
chmod +x "$KIT/capture.sh"
echo "rankscope $(git describe --always --dirty 2>/dev/null || echo unknown) $profile built $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$KIT/KIT_VERSION"
tar -czf "$KIT.tar.gz" -C "$(dirname "$KIT")" "$(basename "$KIT")"
size=$(du -sb "$KIT" | cut -f1)
tgz=$(stat -c %s "$KIT.tar.gz")
echo "kit: $KIT ($((size / 1024)) KiB; $KIT.tar.gz $((tgz / 1024)) KiB)"
if [ "$size" -ge $LIMIT ] || [ "$tgz" -ge $LIMIT ]; then
    echo "build.sh: the kit is over 64 MiB" >&2
    exit 1
fi
