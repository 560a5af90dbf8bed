#!/usr/bin/env bash
# Local rankscope stack for development and demos: a private ClickHouse, the
# collector and one agent, all on 127.0.0.1, state and logs in one directory.
#
#   stack.sh up      start everything in the background (idempotent), print URLs
#   stack.sh down    stop everything started by `up`
#   stack.sh status  show what runs
#
# The agent listens on the rank SDK's default Unix socket
# ($XDG_RUNTIME_DIR/rankscope/agent.sock, else /tmp/rankscope-<uid>/agent.sock),
# so `rankscope run -- torchrun ...` with no --agent is recorded.
#
# Environment: RANKSCOPE_STATE_DIR (default ./.rankscope), RANKSCOPE_BIN_DIR
# (default ./target/release), RANKSCOPE_CLICKHOUSE_URL (use that server instead
# of starting one), RANKSCOPE_ALERT_WEBHOOK_URL (passed to the collector),
# RANKSCOPE_DEV_{GRPC,HTTP,AGENT,AGENT_METRICS}_PORT (default 7700, 7701,
# 7710, 7711) and RANKSCOPE_DEV_CLICKHOUSE_{HTTP,TCP}_PORT (18123, 19000).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state=${RANKSCOPE_STATE_DIR:-$root/.rankscope}
bin=${RANKSCOPE_BIN_DIR:-$root/target/release}
ch_http=${RANKSCOPE_DEV_CLICKHOUSE_HTTP_PORT:-18123}
ch_tcp=${RANKSCOPE_DEV_CLICKHOUSE_TCP_PORT:-19000}
grpc_addr=127.0.0.1:${RANKSCOPE_DEV_GRPC_PORT:-7700}
http_addr=127.0.0.1:${RANKSCOPE_DEV_HTTP_PORT:-7701}
agent_addr=127.0.0.1:${RANKSCOPE_DEV_AGENT_PORT:-7710}
agent_metrics_addr=127.0.0.1:${RANKSCOPE_DEV_AGENT_METRICS_PORT:-7711}
# The SDK's default (rankscope_proto::default_agent_socket_path).
if [ -n "${XDG_RUNTIME_DIR:-}" ]; then
  sock=$XDG_RUNTIME_DIR/rankscope/agent.sock
else
  sock=/tmp/rankscope-$(id -u)/agent.sock
fi

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_http() { # url seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if curl -fsS "$1" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

wait_port() { # host:port seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# The lines a process wrote to <log> since line <n>, without backtrace frames, so
# the error itself is what a failed start shows (RUST_BACKTRACE=1 in the caller's
# environment otherwise fills the tail with frames: CI, stop 43).
log_since() { # log n
  tail -n +"$(($2 + 1))" "$1" | awk '
    /^[Ss]tack backtrace:$/ { frames = 1; next }
    frames && /^[[:space:]]/ { next }
    { frames = 0; print }' | tail -n 20 || true
}

log_lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

up() {
  mkdir -p "$state"
  for b in rankscope-collector rankscope-agent rankscope; do
    [ -x "$bin/$b" ] || { echo "missing $bin/$b: run 'make build' first" >&2; exit 1; }
  done
  local ch_url
  if [ -n "${RANKSCOPE_CLICKHOUSE_URL:-}" ]; then
    ch_url=$RANKSCOPE_CLICKHOUSE_URL
  else
    "$here/clickhouse.sh" start "$state/clickhouse" "$ch_http" "$ch_tcp" >/dev/null
    ch_url=http://127.0.0.1:$ch_http
  fi
  echo "$ch_url" >"$state/clickhouse.url"

  if ! running "$state/collector.pid"; then
    local from
    from=$(log_lines "$state/collector.log")
    RANKSCOPE_ALERT_WEBHOOK_URL=${RANKSCOPE_ALERT_WEBHOOK_URL:-} \
      nohup "$bin/rankscope-collector" --clickhouse-url "$ch_url" \
      --grpc-listen-addr "$grpc_addr" --http-listen-addr "$http_addr" \
      >>"$state/collector.log" 2>&1 &
    echo $! >"$state/collector.pid"
    if ! wait_http "http://$http_addr/healthz" 30; then
      echo "collector did not become healthy; last log lines:" >&2
      log_since "$state/collector.log" "$from" >&2
      exit 1
    fi
  fi
  if ! running "$state/agent.pid"; then
    local from
    from=$(log_lines "$state/agent.log")
    nohup "$bin/rankscope-agent" --listen-addr "$agent_addr" --unix-socket "$sock" \
      --metrics-listen-addr "$agent_metrics_addr" \
      --collector-url "http://$grpc_addr" >>"$state/agent.log" 2>&1 &
    echo $! >"$state/agent.pid"
    if ! wait_port "$agent_addr" 30; then
      echo "agent did not start; last log lines:" >&2
      log_since "$state/agent.log" "$from" >&2
      exit 1
    fi
  fi
  cat <<MSG
rankscope stack is up (state and logs in $state)
  ClickHouse     $ch_url
  collector      gRPC http://$grpc_addr   API http://$http_addr  (/healthz, /metrics, /api/v1/jobs)
  web UI         http://$http_addr/
  agent          gRPC http://$agent_addr  unix:$sock (the SDK's default)  metrics http://$agent_metrics_addr/metrics
Try: $bin/rankscope simulate --ranks 8 --steps 50 && $bin/rankscope jobs
     $bin/rankscope run -- torchrun --nproc-per-node 4 train.py   (recorded with no flags)
MSG
}

stop_pid() { # pidfile name
  if running "$1"; then
    local pid i
    pid=$(cat "$1")
    kill "$pid"
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "stopped $2"
  fi
  rm -f "$1"
}

down() {
  stop_pid "$state/agent.pid" agent
  stop_pid "$state/collector.pid" collector
  if [ -d "$state/clickhouse" ]; then "$here/clickhouse.sh" stop "$state/clickhouse"; fi
}

status() {
  for p in agent collector; do
    if running "$state/$p.pid"; then echo "$p: running (pid $(cat "$state/$p.pid"))"; else echo "$p: stopped"; fi
  done
  [ -f "$state/clickhouse.url" ] && echo "clickhouse: $(cat "$state/clickhouse.url")"
  return 0
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
