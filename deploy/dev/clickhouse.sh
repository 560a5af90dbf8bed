#!/usr/bin/env bash
# Private ClickHouse server for the rankscope development stack.
#
#   clickhouse.sh install                                   install clickhouse-server if no ClickHouse exists
#   clickhouse.sh install-zookeeper                         install Debian's zookeeper if missing (cluster tests)
#   clickhouse.sh start <state_dir> [http_port] [tcp_port]  start in the background (defaults 8123, 9000), print the URL
#   clickhouse.sh stop <state_dir>                          stop the server started in <state_dir>
#   clickhouse.sh status <state_dir>                        print the URL and exit 0 if it runs, exit 1 if not
#   clickhouse.sh apt <package>...                          apt-get install packages (sudo unless root)
#
# The config comes from deploy/dev/clickhouse/{config,users}.xml, the same templates the
# Rust test kit (rankscope-testkit) uses: 127.0.0.1 only, everything under <state_dir>,
# LowCardinality enabled for ClickHouse 18.16. `start` is idempotent: when the server of
# <state_dir> already answers /ping it only prints the URL.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
templates="$here/clickhouse"
start_timeout_s=30

die() { echo "clickhouse.sh: $*" >&2; exit 1; }

usage() {
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# Prints "<path> <leading args>" of a ClickHouse server binary, or nothing.
find_server() {
    local dir name
    for name in clickhouse-server clickhouse; do
        for dir in $(echo "${PATH:-}" | tr ':' ' ') /usr/bin /usr/sbin /usr/local/bin; do
            if [ -x "$dir/$name" ] && [ -f "$dir/$name" ]; then
                if [ "$name" = clickhouse ]; then echo "$dir/$name server"; else echo "$dir/$name"; fi
                return 0
            fi
        done
    done
}

# Installs Debian packages with apt-get, through sudo unless already root.
apt_install() { # <package>...
    command -v apt-get >/dev/null || die "apt-get not found: install $* yourself"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "installing $* needs root (sudo not found)"
        sudo="sudo"
    fi
    echo "Installing $* with apt-get ..."
    # Another install (a second `make test` on a fresh machine, unattended
    # upgrades) may hold dpkg's lock: wait for it, up to 10 minutes, and say so.
    local wait=(-o DPkg::Lock::Timeout=600)
    if command -v fuser >/dev/null && fuser /var/lib/dpkg/lock-frontend /var/lib/apt/lists/lock >/dev/null 2>&1; then
        echo "another apt/dpkg run holds its lock; waiting for it (up to 10 min)"
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" install -y -q "$@"
    # The downloaded .debs are not needed once installed; `make test` on a
    # small CI disk needs the room (ClickHouse's packages alone are large).
    $sudo apt-get "${wait[@]}" clean || true
}

cmd_install() {
    if [ -n "$(find_server)" ]; then
        echo "ClickHouse found: $(find_server)"
        return 0
    fi
    command -v apt-get >/dev/null || die "no ClickHouse and no apt-get: install ClickHouse yourself (https://clickhouse.com/docs/install)"
    apt_install clickhouse-server
    # The package may start a system-wide server on 8123/9000; our dev server needs those ports.
    if command -v systemctl >/dev/null && systemctl is-active --quiet clickhouse-server 2>/dev/null; then
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo systemctl stop clickhouse-server || true
        $sudo systemctl disable clickhouse-server >/dev/null 2>&1 || true
    fi
    [ -n "$(find_server)" ] || die "apt-get finished but no ClickHouse server binary was found"
}

# The ZooKeeper the test kit's ClickHouse clusters run on (rankscope-testkit runs
# org.apache.zookeeper.server.ZooKeeperServerMain from this jar; its manifest names the
# dependencies). The package only installs the jars: no system-wide server is started.
zookeeper_jar=/usr/share/java/zookeeper.jar

cmd_install_zookeeper() {
    if [ -f "$zookeeper_jar" ] && command -v java >/dev/null; then
        echo "ZooKeeper found: $zookeeper_jar"
        return 0
    fi
    apt_install zookeeper
    [ -f "$zookeeper_jar" ] || die "apt-get finished but $zookeeper_jar is missing"
    command -v java >/dev/null || die "ZooKeeper is installed but no java is on PATH"
}

ping_ok() { # <http_port>
    local reply
    if command -v curl >/dev/null; then
        reply="$(curl -fsS --max-time 2 "http://127.0.0.1:$1/ping" 2>/dev/null || true)"
    else # plain bash, for minimal machines without curl
        reply="$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf "GET /ping HTTP/1.0\r\n\r\n" >&3 && cat <&3' "$1" 2>/dev/null | tail -n 1 || true)"
    fi
    [ "$reply" = "Ok." ]
}

running_pid() { # <state_dir>: prints the pid if the recorded process is alive
    local pidfile="$1/clickhouse.pid" pid
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

render() { # <template> <state_dir> <http_port> <tcp_port> > output
    local root="$2"
    root="${root//&/&amp;}"; root="${root//</&lt;}"; root="${root//>/&gt;}"
    root="${root//\\/\\\\}"; root="${root//|/\\|}"
    sed -e "s|@ROOT@|$root|g" -e "s|@HTTP_PORT@|$3|g" -e "s|@TCP_PORT@|$4|g" "$1"
}

cmd_start() {
    [ $# -ge 1 ] || usage
    mkdir -p "$1"
    local dir http_port="${2:-8123}" tcp_port="${3:-9000}"
    dir="$(cd "$1" && pwd)"
    local url="http://127.0.0.1:$http_port"

    if [ -f "$dir/clickhouse.url" ] && running_pid "$dir" >/dev/null; then
        local running_url
        running_url="$(cat "$dir/clickhouse.url")"
        if ping_ok "${running_url##*:}"; then
            echo "$running_url"
            return 0
        fi
    fi
    if ping_ok "$http_port"; then
        die "something else already answers on $url; stop it or pick other ports: clickhouse.sh start $1 <http_port> <tcp_port>"
    fi

    local server
    server="$(find_server)"
    if [ -z "$server" ]; then
        cmd_install
        server="$(find_server)"
    fi

    mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log}
    render "$templates/config.xml" "$dir" "$http_port" "$tcp_port" >"$dir/config.xml"
    render "$templates/users.xml" "$dir" "$http_port" "$tcp_port" >"$dir/users.xml"

    rm -f "$dir/clickhouse.pid"
    # setsid: own session, so Ctrl-C in the terminal that ran `make up` does not stop it.
    # The inner shell records its own pid, which `exec` hands to the server unchanged.
    # shellcheck disable=SC2086,SC2016
    setsid sh -c 'echo $$ > "$0"; exec "$@"' "$dir/clickhouse.pid" $server \
        "--config-file=$dir/config.xml" </dev/null >>"$dir/log/stdout.log" 2>&1 &

    local deadline=$((SECONDS + start_timeout_s))
    until ping_ok "$http_port"; do
        if [ -f "$dir/clickhouse.pid" ] && ! running_pid "$dir" >/dev/null; then
            tail -n 30 "$dir/log/clickhouse-server.err.log" "$dir/log/stdout.log" >&2 2>/dev/null || true
            die "ClickHouse exited during start-up (logs in $dir/log)"
        fi
        if [ $SECONDS -ge $deadline ]; then
            tail -n 30 "$dir/log/clickhouse-server.err.log" >&2 2>/dev/null || true
            cmd_stop "$dir" >/dev/null 2>&1 || true
            die "ClickHouse did not answer $url/ping within ${start_timeout_s}s (logs in $dir/log)"
        fi
        sleep 0.1
    done
    echo "$url" >"$dir/clickhouse.url"
    echo "$url"
}

cmd_stop() {
    [ $# -ge 1 ] || usage
    local dir="$1" pid
    if ! pid="$(running_pid "$dir")"; then
        rm -f "$dir/clickhouse.pid"
        echo "ClickHouse in $dir is not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" != Z ]; do
        if [ $SECONDS -ge $deadline ]; then
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    rm -f "$dir/clickhouse.pid"
    echo "ClickHouse in $dir stopped"
}

cmd_status() {
    [ $# -ge 1 ] || usage
    local dir="$1" url
    if running_pid "$dir" >/dev/null && [ -f "$dir/clickhouse.url" ]; then
        url="$(cat "$dir/clickhouse.url")"
        if ping_ok "${url##*:}"; then
            echo "$url"
            return 0
        fi
    fi
    echo "ClickHouse in $dir is not running" >&2
    return 1
}

[ $# -ge 1 ] || usage
command="$1"
shift
case "$command" in
    install) cmd_install ;;
    install-zookeeper) cmd_install_zookeeper ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    apt) [ $# -ge 1 ] || usage; apt_install "$@" ;;
    *) usage ;;
esac
