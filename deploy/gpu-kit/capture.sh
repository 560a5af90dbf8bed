#!/usr/bin/env bash
# rankscope GPU capture kit: one command on a GPU node with no network and no
# ClickHouse. Usage: capture.sh OUT_DIR
#
# Writes only into OUT_DIR (created; must be empty or absent):
#   check.txt            rankscope-agent --check (NVML: GPUs, UUIDs, metrics, GPM)
#   dump/                every batch the agent would have sent (--dump-dir):
#                        replay here with `make gpu-replay DIR=OUT_DIR`
#   agent.log            the agent's log (RUST_LOG=info)
#   traces/<job>/        daemon-mode Kineto traces (--trace-on-start), gzipped
#   job-*.log, job-*.json  each workload's output and its facts (backend, device)
#   nvidia-smi-q.txt     `nvidia-smi -q` (when present)
#   versions.txt         kit, OS, Python, torch, CUDA, NCCL, driver
#   summary.txt          every step: ran / SKIPPED (why) / FAILED (why)
# Without a GPU the same steps run on CPU; summary.txt says what was skipped.
# Bounded: each job has a time limit (JOB_TIMEOUT_S, default 150 s; at most
# three jobs run), so the whole run stays under 8 minutes.
set -u
OUT=${1:?usage: capture.sh OUT_DIR}
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
JOB_TIMEOUT_S=${JOB_TIMEOUT_S:-150}
RANKS=${RANKS:-4}
STEPS=${STEPS:-120}
TRACE_ITERATIONS=${TRACE_ITERATIONS:-3}

if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    echo "capture.sh: $OUT is not empty; give a new folder" >&2
    exit 2
fi
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
mkdir -p "$OUT/run" "$OUT/traces" "$OUT/dump" "$OUT/py" "$OUT/cache"
exec > >(tee -a "$OUT/capture.log") 2>&1
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
ran() { note "ran      $1"; }
skipped() { note "SKIPPED  $1: $2"; }
failed() { note "FAILED   $1: $2"; }
started=$(date +%s)

# Temporary files of Python and the tools stay in OUT_DIR too.
export TMPDIR="$OUT/run" XDG_CACHE_HOME="$OUT/cache" XDG_RUNTIME_DIR="$OUT/run"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# NCCL says in the job's log why it refuses a job (e.g. two ranks on one GPU).
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# --- the rankscope Python package: the kit's abi3 wheel, unpacked (no pip, no network)
wheel=$(ls "$KIT"/wheels/rankscope-*.whl 2>/dev/null | head -1)
if [ -n "$wheel" ] && "$PYTHON" -m zipfile -e "$wheel" "$OUT/py" >/dev/null; then
    export PYTHONPATH="$OUT/py${PYTHONPATH:+:$PYTHONPATH}"
    ran "wheel $(basename "$wheel") unpacked into py/"
elif [ -z "$wheel" ] && "$PYTHON" -c 'import rankscope' 2>/dev/null; then
    ran "rankscope package: $PYTHON's own (the kit has no wheel: build.sh --prebuilt)"
else
    failed "wheel" "no usable rankscope wheel in $KIT/wheels and $PYTHON has no rankscope package"
fi

# --- hardware and versions
have_gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    have_gpu=1
    nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1 && ran "nvidia-smi -q"
else
    skipped "nvidia-smi -q" "no nvidia-smi or no GPU visible"
fi
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "kit: $(cat "$KIT/KIT_VERSION" 2>/dev/null || echo unknown)"
    echo "host: $(uname -srm)"
    echo "cpus: $(getconf _NPROCESSORS_ONLN)"  # nproc would print OMP_NUM_THREADS (1, set above)
    [ -r /etc/os-release ] && echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "python: $("$PYTHON" -c 'import sys; print(sys.version.split()[0])' 2>&1)"
    "$PYTHON" - <<'EOF' 2>&1
import torch
print("torch:", torch.__version__)
print("torch cuda:", torch.version.cuda)
print("cuda available:", torch.cuda.is_available())
if torch.cuda.is_available():
    print("nccl:", ".".join(map(str, torch.cuda.nccl.version())))
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"gpu {i}: {p.name}, sm {p.major}.{p.minor}, {p.total_memory >> 20} MiB")
EOF
    if [ $have_gpu = 1 ]; then
        echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
        echo "gpus: $(nvidia-smi --query-gpu=name,uuid --format=csv,noheader | paste -sd ';')"
    fi
    command -v nvcc >/dev/null && echo "nvcc: $(nvcc --version | tail -1)"
    echo "rankscope-agent: $("$KIT/bin/rankscope-agent" --version 2>&1)"
} >"$OUT/versions.txt"
ran "versions"
cuda=$("$PYTHON" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
[ "$cuda" = 1 ] || skipped "CUDA compute" "torch sees no CUDA device (torch.cuda.is_available() is False): the jobs compute on CPU, no CUDA events, no CUDA kernels"

# --- the agent's view of the node
"$KIT/bin/rankscope-agent" --check >"$OUT/check.txt" 2>&1
ran "rankscope-agent --check (exit $?)"
grep -qi "nvml.*\(fail\|unavailable\|dlopen\|not\)" "$OUT/check.txt" &&
    skipped "NVML sampling" "$(grep -i -m1 nvml "$OUT/check.txt")"

# --- the agent: dump sink, 10 Hz GPU sampling, local trace trigger
cat >"$OUT/agent.toml" <<EOF
listen_addr = "127.0.0.1:0"
metrics_listen_addr = ""
unix_socket_path = "$OUT/run/agent.sock"
agent_id = "gpukit"
node = "gpukit-node"
gpu_sample_interval_ms = 100
host_sample_interval_ms = 500
trace_dir = "$OUT/traces"
keep_traces = true
EOF
RUST_LOG=${RUST_LOG:-info} "$KIT/bin/rankscope-agent" --config "$OUT/agent.toml" \
    --dump-dir "$OUT/dump" --trace-on-start "$TRACE_ITERATIONS" 2>"$OUT/agent.log" &
agent=$!
for _ in $(seq 100); do [ -S "$OUT/run/agent.sock" ] && break; sleep 0.1; done
if [ -S "$OUT/run/agent.sock" ]; then
    ran "agent (pid $agent, dump + --trace-on-start $TRACE_ITERATIONS)"
else
    failed "agent" "no socket after 10 s: $(tail -3 "$OUT/agent.log")"
fi
grep -q "kineto daemon endpoint off" "$OUT/agent.log" &&
    failed "Kineto daemon endpoint" "$(grep -m1 'kineto daemon endpoint off' "$OUT/agent.log")"

port=29511
job() { # name nproc args...
    local name=$1 nproc=$2
    shift 2
    port=$((port + 1))
    KINETO_USE_DAEMON=1 timeout -k 10 "$JOB_TIMEOUT_S" "$KIT/bin/rankscope" run \
        --agent "unix:$OUT/run/agent.sock" --job "$name" -- \
        "$PYTHON" -m torch.distributed.run --nproc-per-node "$nproc" --master-port $port \
        "$KIT/workloads/ddp_gpu.py" --info "$OUT/$name.json" --await-trace "$OUT/traces" \
        "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ $rc = 0 ]; then
        # The ranks and Kineto (unbuffered std::cerr, a write per piece) share
        # the log, so a rank's line may start mid-line: count distinct ranks.
        ran "job $name ($nproc ranks; $(grep -o -m1 'collectives: .*' "$OUT/$name.log"); traces written: $(grep -o 'trace: rank [0-9]* written' "$OUT/$name.log" | sort -u | wc -l) of $nproc)"
    else
        # torchrun's summary names the first failed rank's exit code (a signal).
        why=$(grep -A6 'Root Cause' "$OUT/$name.log" | grep -m1 -E 'exitcode|traceback' | sed 's/^ *//')
        failed "job $name" "exit $rc; see $name.log: ${why:-$(grep -v '^\s*$' "$OUT/$name.log" | tail -1)}"
    fi
    return $rc
}
# A planted compute straggler: rank 1 of RANKS (4: the straggler analysis
# needs 4 ranks by default), all on the one GPU.
if ! job gpukit-ddp "$RANKS" --steps "$STEPS" --slow-rank 1 --backend auto && [ "$cuda" = 1 ]; then
    # Trying NCCL on a shared device may have killed the job: once more on gloo.
    job gpukit-ddp-gloo "$RANKS" --steps "$STEPS" --slow-rank 1 --backend gloo
fi
if [ "$cuda" = 1 ]; then
    job gpukit-nccl1 1 --steps "$STEPS" --backend nccl
else
    skipped "job gpukit-nccl1" "NCCL needs a CUDA device"
fi

# Traces: the agent marks a file captured after it kept its size 1 s.
sleep 2
kill -TERM "$agent" 2>/dev/null
wait "$agent"
ran "agent stopped (exit $?; $(ls "$OUT/dump" | wc -l) batches in dump/)"
n=0
for f in "$OUT"/traces/*.json; do
    [ -e "$f" ] || continue
    gzip -9 "$f" && n=$((n + 1))
done
# traces/<job>/: the agent's log names the job of each local trace id.
grep -o 'local trigger: tracing a new job job=[^ ]* .*trace_id=local-[0-9]*' "$OUT/agent.log" |
    sed 's/.* job=\([^ ]*\) .*trace_id=\(local-[0-9]*\)/\1 \2/' | while read -r jobname tid; do
    mkdir -p "$OUT/traces/$jobname"
    mv "$OUT"/traces/"$tid"-r*.json.gz "$OUT/traces/$jobname/" 2>/dev/null
done
if [ $n -gt 0 ]; then ran "traces: $n captured (gzipped): $(cd "$OUT/traces" && echo */)"; else failed "traces" "none captured; see agent.log"; fi
grep -q '"ph": *"X", *"cat": *"kernel"\|"cat": *"kernel"' <(zcat "$OUT"/traces/*/*.gz 2>/dev/null) ||
    skipped "CUDA kernels in traces" "no kernel events (no CUDA device, or CUPTI unavailable)"
rm -rf "$OUT/run" "$OUT/cache" "$OUT/py"  # py/: a copy of the kit's wheel
note "took $(($(date +%s) - started)) s"
echo "capture done: $OUT (replay: make gpu-replay DIR=$OUT)"
