#!/usr/bin/env bash
# The agent's own CPU cost on this node's real NVML (issue 38, goal 3):
# rankscope-agent with a dump sink and no jobs, sampling every GPU at each
# interval for SECONDS, its CPU time read from /proc. Usage:
#   agent-cost.sh OUT_DIR [SECONDS] [INTERVALS_MS...]   (default 30 s; 100 1000)
# AGENT=PATH measures another agent binary. Prints one line per interval: gpus, samples, CPU seconds, % of one core
# (from /proc/PID/stat's 10 ms ticks), batches, and the threads' run time in % (schedstat, ns).
# REALTIME=1: also 8 simulated ranks stream into the agent meanwhile, paced at
# the bench's per-node rate (bench/src/idle.rs: 1,318.4 events/s, 12 layers),
# the shape of `agent_cpu_pct_8_ranks_realtime` on this node's real NVML.
# WORKER_THREADS=N: the agent's worker_threads (default: the agent's own, 1),
# to compare runtimes on the node's real NVML.
# KINETO_DAEMON_NAME: the abstract socket of the agent's Kineto endpoint
# (default dynolog, as a node's agent; another name where an agent or
# Dynolog already holds it).
set -u
OUT=${1:?usage: agent-cost.sh OUT_DIR [SECONDS] [INTERVALS_MS...]}
SECS=${2:-30}
if [ $# -ge 2 ]; then shift 2; else shift $#; fi
INTERVALS=("$@")
[ ${#INTERVALS[@]} -eq 0 ] && INTERVALS=(100 1000)
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
tck=$(getconf CLK_TCK)
REALTIME=${REALTIME:-0}
CLI=${CLI:-$KIT/bin/rankscope}
port=${PORT:-50611}
# Run time in ns of the process's live threads (/proc/PID/task/*/schedstat):
# finer than stat's 10 ms ticks; a thread that ends inside the window drops
# out of the second sum, so the ticks stay the headline figure.
task_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
for ms in "${INTERVALS[@]}"; do
    d="$OUT/cost-$ms"
    rm -rf "$d"; mkdir -p "$d/run" "$d/dump"
    cat >"$d/agent.toml" <<TOML
listen_addr = "127.0.0.1:$port"
metrics_listen_addr = ""
unix_socket_path = "$d/run/agent.sock"
agent_id = "cost"
node = "cost-node"
gpu_sample_interval_ms = $ms
kineto_daemon_name = "${KINETO_DAEMON_NAME:-dynolog}"
host_sample_interval_ms = 1000
${WORKER_THREADS:+worker_threads = $WORKER_THREADS}
TOML
    RUST_LOG=warn "${AGENT:-$KIT/bin/rankscope-agent}" --config "$d/agent.toml" --dump-dir "$d/dump" 2>"$d/agent.log" &
    pid=$!
    for _ in $(seq 100); do [ -S "$d/run/agent.sock" ] && break; sleep 0.1; done
    # Start-up (NVML init, first ticks) is not the steady cost: measure after it.
    sim=
    if [ "$REALTIME" = 1 ]; then
        # 1,318.4 events/s, 2,688 events a step (8 ranks x 336): the run
        # outlasts the 2 s start and the window by 2 s.
        steps=$(( (SECS + 4) * 1318 / 2688 + 1 ))
        "$CLI" simulate --format json --agent "http://127.0.0.1:$port" --job "cost-realtime-$ms" \
            --ranks 8 --layers 12 --steps "$steps" --rate 1318.4 >"$d/simulate.json" 2>"$d/simulate.log" &
        sim=$!
    fi
    sleep 2
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    n0=$(task_ns "$pid")
    t0=$(date +%s.%N)
    sleep "$SECS"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    n1=$(task_ns "$pid")
    t1=$(date +%s.%N)
    [ -n "$sim" ] && { wait "$sim" || echo "simulate failed: $(tail -3 "$d/simulate.log")"; }
    kill -TERM "$pid"; wait "$pid"
    awk -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v tck="$tck" -v t0="$t0" -v t1="$t1" -v ms="$ms" -v mode="$([ "$REALTIME" = 1 ] && echo 'realtime 8 ranks, ')${WORKER_THREADS:+worker_threads $WORKER_THREADS, }" \
        -v gpus="$(grep -c . <(nvidia-smi -L 2>/dev/null))" -v batches="$(ls "$d/dump" | wc -l)" -v ns="$((n1 - n0))" \
        'BEGIN { cpu = (u + s) / tck; wall = t1 - t0;
                 printf "%sinterval %5d ms: gpus %d, %.1f s, cpu %.3f s (user %.3f, sys %.3f), %.3f %% of one core, %d batches, threads %.4f %%\n",
                        mode, ms, gpus, wall, cpu, u / tck, s / tck, 100 * cpu / wall, batches, 100 * ns / 1e9 / wall }' | tee -a "$OUT/agent-cost.txt"
done
