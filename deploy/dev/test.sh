#!/usr/bin/env bash
# The test phase of `make test` (README "Tests"): builds, then runs every test
# binary of the workspace and the Python tests, and reports every failure.
#
# - Isolation: the tests run in a private network namespace (`unshare -n`,
#   as root here and in CI; `unshare -rn` as a user where user namespaces are
#   allowed) with only a loopback. libkineto's `dynolog` endpoint is an
#   abstract Unix socket name, and abstract names and TCP ports are per
#   network namespace: a running `make up` stack, or a second `make test`,
#   cannot hold them. Without namespaces the suite runs as it is and says so.
# - Every failure shows: `cargo test --no-fail-fast` runs every binary, and
#   the Python tests run whatever cargo's result; the exit status is non-zero
#   when anything failed.
# - Time: each phase's wall time and the slowest test binaries are printed
#   at the end.
# - One test phase per machine at a time: several tests time real work (a
#   straggler's what-if gain against a run without it, failover within
#   timeouts, latencies), which two suites sharing a 2-core machine distort.
#   A second `make test` (any checkout) builds alongside, then says that
#   another run holds the test phase and waits for it (`flock` on
#   $RANKSCOPE_TEST_LOCK, default /tmp/rankscope-test-phase.lock).
#
# Environment: CARGO (default cargo), VENV (the venv `make py` built),
# CHDB_VENV (the venv `make chdb` built: ClickHouse 26.x for the second tier).
set -uo pipefail
cd "$(dirname "$0")/../.."
CARGO=${CARGO:-cargo}
VENV=${VENV:-$PWD/.venv}
export RANKSCOPE_CHDB_VENV=${CHDB_VENV:-${RANKSCOPE_CHDB_VENV:-$PWD/.venv-chdb}}
# PRODUCERS_VENV: `make producers`' venv (PaddlePaddle, ONNX Runtime) for
# kineto/tests/producers.rs.
export RANKSCOPE_PRODUCERS_VENV=${PRODUCERS_VENV:-${RANKSCOPE_PRODUCERS_VENV:-$PWD/.venv-producers}}

if [ -z "${RANKSCOPE_TEST_NETNS:-}" ]; then
  log_dir=$(mktemp -d "${TMPDIR:-/tmp}/rankscope-test.XXXXXX")
  # Build outside the namespace: a fresh machine downloads crates here.
  t0=$SECONDS
  echo "== build (sdk C library, every test binary)"
  # Disk: the build writes ~50 test binaries; incremental compilation would
  # add gigabytes of per-crate caches that a one-shot build never reads again
  # (CI ran out of disk there once). A developer's own CARGO_INCREMENTAL wins.
  export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
  target_dir=${CARGO_TARGET_DIR:-target}
  mkdir -p "$target_dir"
  # A fresh build of the test binaries takes about 1.5 GB; say so before a
  # compiler dies of it mid-build with an I/O error.
  free_kib=$(df -k --output=avail "$target_dir" | tail -1 | tr -d ' ')
  echo "free disk before the build: $((${free_kib:-0} / 1024 / 1024)) GB at $target_dir"
  if [ "${free_kib:-0}" -lt $((3 * 1024 * 1024)) ]; then
    echo "warning: less than 3 GB free at $target_dir; a fresh test build needs about 1.5 GB (README \"Tests\")" >&2
  fi
  $CARGO build --locked -p rankscope-sdk --lib || exit 1
  RANKSCOPE_VENV=$VENV $CARGO test --workspace --locked --exclude rankscope-python --no-run || exit 1
  echo "build: $((SECONDS - t0)) s (free disk after it: $(df -h --output=avail "$target_dir" | tail -1 | tr -d " "))" >"$log_dir/phases"
  export RANKSCOPE_TEST_LOG_DIR=$log_dir
  if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
    exec env RANKSCOPE_TEST_NETNS=root unshare -n "$0" "$@"
  elif unshare -rn true 2>/dev/null; then
    exec env RANKSCOPE_TEST_NETNS=user unshare -rn "$0" "$@"
  fi
  echo "warning: cannot create a network namespace (needs root or user namespaces):" \
    "the tests share this machine's ports and abstract socket names; a running" \
    "\`make up\` stack holds libkineto's @dynolog and fails the daemon tests" >&2
else
  log_dir=${RANKSCOPE_TEST_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/rankscope-test.XXXXXX")}
  # A new namespace's loopback is down.
  if command -v ip >/dev/null; then
    ip link set lo up
  else
    echo "error: \`ip\` (iproute2) is missing: \`make deps\` installs it" >&2
    exit 1
  fi
  echo "== tests run in a private network namespace ($RANKSCOPE_TEST_NETNS): ports and @dynolog are theirs alone"
fi

# One test phase per machine (see the header).
test_lock=${RANKSCOPE_TEST_LOCK:-/tmp/rankscope-test-phase.lock}
exec 7>>"$test_lock"
if ! flock -n 7; then
  echo "another make test is in its test phase on this machine ($test_lock); waiting for it"
  t_wait=$SECONDS
  flock 7
  echo "waited $((SECONDS - t_wait)) s for the other run"
fi

# The venv is shared with other runs: hold its lock shared for the whole test
# phase (torch tests and pytest import the rankscope package from it), so a
# second run's `make py` never reinstalls the package under these tests
# (deploy/dev/venv.sh takes it exclusively only to install).
exec 8>"$VENV.lock"
if ! flock -s -n 8; then echo "another run is building $VENV; waiting for it"; flock -s 8; fi

status=0
t0=$SECONDS
echo "== cargo test (every binary, failures reported at the end)"
RANKSCOPE_VENV=$VENV $CARGO test --workspace --locked --exclude rankscope-python \
  --exclude rankscope-testkit --no-fail-fast 2>&1 | tee "$log_dir/cargo.log"
cargo_rc=${PIPESTATUS[0]}
RANKSCOPE_VENV=$VENV $CARGO test --locked -p rankscope-testkit --lib --no-fail-fast \
  2>&1 | tee -a "$log_dir/cargo.log"
[ "${PIPESTATUS[0]}" = 0 ] || cargo_rc=1
# The end-to-end tests are one binary (testkit/tests/e2e.rs says why); each
# of its modules runs in a process of its own, one after the other, as when
# they were separate binaries: a module that times real work or serves
# `@dynolog` has the machine to itself.
e2e_tests=$(RANKSCOPE_VENV=$VENV $CARGO test --locked -p rankscope-testkit --test e2e -- --list --format terse \
  2>>"$log_dir/cargo.log" | sed -n 's/: test$//p')
if [ -z "$e2e_tests" ]; then
  echo "error: the e2e test binary listed no tests" | tee -a "$log_dir/cargo.log"
  cargo_rc=1
fi
for module in $(printf '%s\n' "$e2e_tests" | sed -n 's/::.*//p' | sort -u); do
  echo "== e2e::$module" | tee -a "$log_dir/cargo.log"
  # shellcheck disable=SC2046 # one argument per test name
  RANKSCOPE_VENV=$VENV $CARGO test --locked -p rankscope-testkit --test e2e -- --exact \
    $(printf '%s\n' "$e2e_tests" | grep "^$module::") 2>&1 | tee -a "$log_dir/cargo.log"
  [ "${PIPESTATUS[0]}" = 0 ] || cargo_rc=1
done
[ "$cargo_rc" = 0 ] || status=1
echo "cargo test: $((SECONDS - t0)) s" >>"$log_dir/phases"

t0=$SECONDS
echo "== cargo test -p rankscope-collector --test store, on ClickHouse 26.x (chDB)"
RANKSCOPE_CLICKHOUSE_ENGINE=chdb $CARGO test --locked -p rankscope-collector --test store \
  2>&1 | tee "$log_dir/cargo-chdb.log"
chdb_rc=${PIPESTATUS[0]}
[ "$chdb_rc" = 0 ] || status=1
echo "store tests on 26.x: $((SECONDS - t0)) s" >>"$log_dir/phases"

t0=$SECONDS
echo "== pytest python/tests"
RANKSCOPE_BIN_DIR=$PWD/target/debug "$VENV/bin/python" -m pytest -q python/tests 2>&1 |
  tee "$log_dir/pytest.log"
py_rc=${PIPESTATUS[0]}
[ "$py_rc" = 0 ] || status=1
echo "pytest: $((SECONDS - t0)) s" >>"$log_dir/phases"

echo
echo "== time by phase"
cat "$log_dir/phases"
echo "== slowest test binaries and e2e modules (libtest's own time)"
# Pairs each "Running <target>" / "Doc-tests <crate>" / "== e2e::<module>"
# line with the "finished in N s" of its result line.
awk '
  /^== e2e::/ { name = $2; next }
  /^ *Running .*\/e2e-[0-9a-f]+\)$/ { next }
  /^ *Running / { name = $NF; gsub(/[()]/, "", name); sub(/.*\//, "", name); sub(/-[0-9a-f]+$/, "", name); next }
  /^ *Doc-tests / { name = "doc-tests " $2; next }
  /^test result:/ { for (i = 1; i <= NF; i++) if ($i == "in") { t = $(i + 1); sub(/s$/, "", t) }
                    printf "%10.2f s  %s\n", t, name }
' "$log_dir/cargo.log" | sort -rn | head -10

if [ "$status" != 0 ]; then
  echo
  echo "== FAILED"
  [ "$cargo_rc" = 0 ] || {
    echo "cargo test (exit $cargo_rc):"
    grep -E '^test .* FAILED$|^    `.*`$|^error: .*(failed|target|no tests)' "$log_dir/cargo.log" | sed 's/^/  /'
    echo "  (one e2e module again: cargo test -p rankscope-testkit --test e2e -- <module>::)"
  }
  [ "$chdb_rc" = 0 ] || {
    echo "store tests on ClickHouse 26.x (exit $chdb_rc):"
    grep -E '^test .* FAILED$' "$log_dir/cargo-chdb.log" | sed 's/^/  /'
  }
  [ "$py_rc" = 0 ] || echo "pytest (exit $py_rc): see $log_dir/pytest.log"
  echo "logs: $log_dir"
fi
exit "$status"
