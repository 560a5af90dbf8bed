#!/usr/bin/env bash
# The agent's own cost with telemetry on: 8 stand-in GPUs sampled at 10 Hz
# (the NVML stand-in of agent/tests/nvml_stub, through the real nvml-wrapper
# path), host sampling at 1 Hz and 8 simulated ranks streaming in real time,
# against a real collector and a private ClickHouse on this machine.
#
#   bench/agent_telemetry/run.sh [seconds]      (default 60 per case)
#   CASES="name:gpu_ms:host_ms:ranks(0|1)[:worker_threads] ..." bench/agent_telemetry/run.sh   (other cases)
#
# Cases (each a fresh agent): `telemetry+ranks` (the issue's target),
# `telemetry` (no ranks: the sampler alone), `ranks` (telemetry off: the
# event path alone), `idle` (nothing to do). The event rate of the ranks is
# counted in ClickHouse afterwards (event rows of the case's job / seconds the
# simulator ran). Measured with public tools only: CPU from utime+stime in
# /proc/<pid>/stat over the window (after a 5 s warm-up), peak RSS = VmHWM of
# /proc/<pid>/status. Writes a Markdown table to bench/agent_telemetry/last-run.md
# (override with OUT=...). Needs release binaries (`make build`) and cc.
# Not part of `make test`.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-60}
bin=${RANKSCOPE_BIN_DIR:-$root/target/release}
out=${OUT:-$root/bench/agent_telemetry/last-run.md}
ch_http=${BENCH_CH_HTTP_PORT:-28123}
ch_tcp=${BENCH_CH_TCP_PORT:-29000}
grpc=127.0.0.1:${BENCH_GRPC_PORT:-27700}
api=127.0.0.1:${BENCH_HTTP_PORT:-27701}
agent_addr=127.0.0.1:${BENCH_AGENT_PORT:-27710}
work=$(mktemp -d /tmp/rankscope-bench-telemetry.XXXXXX)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$root/deploy/dev/clickhouse.sh" stop "$work/ch" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

for b in rankscope-agent rankscope-collector rankscope; do
  [ -x "$bin/$b" ] || { echo "missing $bin/$b: run 'make build' first" >&2; exit 1; }
done

wait_http() { for _ in $(seq 300); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
wait_port() { for _ in $(seq 300); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# The stand-in NVML: 8 GPUs, GPU g runs simulated rank g (pid 10000 + g), GPM on.
cc -shared -fPIC -O2 -o "$work/libnvidia-ml.so.1" "$root/agent/tests/nvml_stub/nvml_stub.c" -lpthread -ldl
{
  echo "device_count 8"
  for g in 0 1 2 3 4 5 6 7; do
    echo "gpu $g process $((10000 + g)) 1073741824"
    echo "gpu $g gpm 1"
    echo "gpu $g gpm_sm_active 90"
    echo "gpu $g nvlink_tx_kib_s 1048576"
  done
} >"$work/nvml-stub.conf"

"$root/deploy/dev/clickhouse.sh" start "$work/ch" "$ch_http" "$ch_tcp" >/dev/null
"$bin/rankscope-collector" --clickhouse-url "http://127.0.0.1:$ch_http" \
  --grpc-listen-addr "$grpc" --http-listen-addr "$api" >"$work/collector.log" 2>&1 &
pids+=($!)
wait_http "http://$api/healthz" || { tail "$work/collector.log" >&2; exit 1; }

hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

events_of() { # job
  local db="rankscope" q=""
  for t in steps spans collectives kernels; do q="$q${q:+ + }(SELECT count() FROM $db.$t WHERE job_id = '$1')"; done
  clickhouse-client --port "$ch_tcp" -q "SELECT $q"
}

run_case() { # name gpu_ms host_ms ranks(0|1) [worker_threads]
  local name=$1 gpu_ms=$2 host_ms=$3 ranks=$4 threads=${5:-} agent sim="" t0 t1 c0 c1 s0 s1 job="bench-$1-$$" evs=0
  cat >"$work/agent-$name.toml" <<TOML
listen_addr = "$agent_addr"
unix_socket_path = ""
collector_url = "http://$grpc"
gpu_sample_interval_ms = $gpu_ms
host_sample_interval_ms = $host_ms
nvml_library_path = "$work/libnvidia-ml.so.1"
${threads:+worker_threads = $threads}
TOML
  "$bin/rankscope-agent" --config "$work/agent-$name.toml" >"$work/agent-$name.log" 2>&1 &
  agent=$!
  pids+=("$agent")
  wait_port "$agent_addr" || { tail "$work/agent-$name.log" >&2; exit 1; }
  if [ "$ranks" = 1 ]; then
    # ~10 steps/s per rank in real time; enough steps to outlast the window.
    s0=$(date +%s.%N)
    "$bin/rankscope" simulate --agent "http://$agent_addr" --job "$job" --ranks 8 \
      --layers 2 --steps $(((secs + 20) * 10)) --realtime --format json >"$work/sim-$name.json" 2>&1 &
    sim=$!
    pids+=("$sim")
  fi
  sleep 5
  c0=$(ticks "$agent"); t0=$(date +%s.%N)
  sleep "$secs"
  c1=$(ticks "$agent"); t1=$(date +%s.%N)
  local hwm rss
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$agent/status")
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$agent/status")
  if [ -n "$sim" ]; then kill "$sim" 2>/dev/null || true; s1=$(date +%s.%N); fi
  kill "$agent"
  wait "$agent" 2>/dev/null || true
  if [ -n "$sim" ]; then
    sleep 2 # the collector's last flush
    evs=$(awk -v n="$(events_of "$job")" -v a="$s0" -v b="$s1" 'BEGIN { printf "%.0f", n / (b - a) }')
  fi
  awk -v n="$name" -v c="$((c1 - c0))" -v hz="$hz" -v t0="$t0" -v t1="$t1" -v hwm="$hwm" -v rss="$rss" \
    -v g="$gpu_ms" -v h="$host_ms" -v r="$ranks" -v e="$evs" 'BEGIN {
      printf "| %s | %s | %s | %s | %.2f | %.1f | %.1f |\n", n, (g ? 1000 / g " Hz" : "off"),
        (h ? 1000 / h " Hz" : "off"), (r ? "8 streaming, " e " events/s" : "none"),
        100 * c / hz / (t1 - t0), hwm / 1024, rss / 1024 }'
}

{
  echo "| case | GPU sampling (8 GPUs) | host sampling | ranks | CPU % of one core | peak RSS MiB | RSS at end MiB |"
  echo "|---|---|---|---|---|---|---|"
  for c in ${CASES:-telemetry+ranks:100:1000:1 telemetry:100:1000:0 ranks:0:0:1 idle:0:0:0 telemetry+ranks-1thread:100:1000:1:1 ranks-1thread:0:0:1:1}; do
    IFS=: read -r name gpu_ms host_ms ranks threads <<<"$c"
    run_case "$name" "$gpu_ms" "$host_ms" "$ranks" "${threads:-}"
  done
} | tee "$out"
echo
echo "window ${secs} s per case; machine: $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | sed 's/^ //'), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)" | tee -a "$out"
