#!/usr/bin/env bash
# Builds the GPU capture kit (README "GPU capture kit"): one folder and its
# .tar.gz, under 64 MiB (what can be brought to a GPU node), holding
#   bin/rankscope-agent bin/rankscope   stripped
#   wheels/rankscope-*.whl              the Python package, abi3 (CPython >= 3.9)
#   workloads/ddp_gpu.py                the training job (plain torch)
#   capture.sh KIT_VERSION
#   agent-cost.sh nvml-cost.py          the agent's CPU cost on real NVML
# Usage: build.sh [--debug | --prebuilt] KIT_DIR VENV
#   --debug: the debug binaries and a debug wheel (quicker; a CPU capture
#   here); without it release builds (`make gpu-kit`).
#   --prebuilt: the debug binaries already in target/debug and no wheel
#   (capture.sh then uses the Python's own rankscope package): no cargo, no
#   maturin, for testkit/tests/gpu_kit.rs, which runs inside `cargo test`.
set -euo pipefail
profile=release build=1
case "${1:-}" in
--debug) profile=debug; shift ;;
--prebuilt) profile=debug build=0; shift ;;
esac
KIT=${1:?usage: build.sh [--debug | --prebuilt] KIT_DIR VENV}
mkdir -p "$(dirname "$KIT")"; KIT=$(cd "$(dirname "$KIT")" && pwd)/$(basename "$KIT")
VENV=${2:?usage: build.sh [--debug | --prebuilt] KIT_DIR VENV}
CARGO=${CARGO:-cargo}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIMIT=$((64 * 1024 * 1024))
cd "$ROOT"

flag=(); [ $profile = release ] && flag=(--release)
[ $build = 1 ] && "$CARGO" build "${flag[@]}" --locked -p rankscope-agent -p rankscope-cli --bin rankscope-agent --bin rankscope
rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/wheels" "$KIT/workloads"
for b in rankscope-agent rankscope; do
    cp "target/$profile/$b" "$KIT/bin/$b"
    strip "$KIT/bin/$b"
done
if [ $build = 1 ]; then
    (cd python && VIRTUAL_ENV=$VENV PATH=$VENV/bin:$PATH maturin build "${flag[@]}" --locked -q -o "$KIT/wheels")
    ls "$KIT"/wheels/rankscope-*abi3*.whl >/dev/null || { echo "build.sh: no abi3 wheel was built" >&2; exit 1; }
fi
cp deploy/gpu-kit/workloads/*.py "$KIT/workloads/"
cp deploy/gpu-kit/capture.sh deploy/gpu-kit/agent-cost.sh deploy/gpu-kit/nvml-cost.py "$KIT/"
chmod +x "$KIT/capture.sh" "$KIT/agent-cost.sh"
kind=$profile; [ $build = 0 ] && kind=prebuilt
echo "rankscope $(git describe --always --dirty 2>/dev/null || echo unknown) $kind built $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$KIT/KIT_VERSION"
tar -czf "$KIT.tar.gz" -C "$(dirname "$KIT")" "$(basename "$KIT")"
size=$(du -sb "$KIT" | cut -f1)
tgz=$(stat -c %s "$KIT.tar.gz")
echo "kit: $KIT ($((size / 1024)) KiB; $KIT.tar.gz $((tgz / 1024)) KiB)"
if [ "$size" -ge $LIMIT ] || [ "$tgz" -ge $LIMIT ]; then
    echo "build.sh: the kit is over 64 MiB" >&2
    exit 1
fi
