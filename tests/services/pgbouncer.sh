#!/bin/sh
# PgBouncer in transaction pooling mode in front of the test PostgreSQL, for the pooler tier.
#   tests/services/pgbouncer.sh start|stop|status
# PGBOUNCER_PORT (default 6432) is where it listens; PG_HOST / PG_PORT (127.0.0.1:5432) is the
# server behind it, reached as user postgres without a password (as the test tiers do).
# PgBouncer refuses to run as root: as root it is started with -u postgres.
set -eu
PORT="${PGBOUNCER_PORT:-6432}"
DIR="${PGBOUNCER_DIR:-/tmp/idempotency-pgbouncer-$PORT}"
BIN="${PGBOUNCER:-/usr/sbin/pgbouncer}"

start() {
    mkdir -p "$DIR"
    cat >"$DIR/pgbouncer.ini" <<INI
[databases]
* = host=${PG_HOST:-127.0.0.1} port=${PG_PORT:-5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/users.txt
pool_mode = transaction
; the race tests open 20+ connections at once; keep them all server-backed
max_client_conn = 400
default_pool_size = 40
; the test databases are created and dropped by the suite: don't keep their server
; connections around longer than needed
server_idle_timeout = 5
ignore_startup_parameters = extra_float_digits,options
admin_users = postgres
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
INI
    echo '"postgres" ""' >"$DIR/users.txt"
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres "$DIR"
        set -- -u postgres
    else
        set --
    fi
    "$BIN" -d "$@" "$DIR/pgbouncer.ini"
    for _ in $(seq 50); do
        if python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null; then
            echo "pgbouncer: transaction pooling on 127.0.0.1:$PORT ($("$BIN" --version | head -1))"
            return 0
        fi
        sleep 0.1
    done
    echo "pgbouncer did not start; see $DIR/pgbouncer.log" >&2
    return 1
}

stop() {
    if [ -f "$DIR/pgbouncer.pid" ]; then
        kill "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null || true
        rm -f "$DIR/pgbouncer.pid"
    fi
}

case "${1:-}" in
    start) stop; start ;;
    stop) stop ;;
    status) [ -f "$DIR/pgbouncer.pid" ] && kill -0 "$(cat "$DIR/pgbouncer.pid")" ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
