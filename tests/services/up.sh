#!/usr/bin/env bash
# What `make test` needs on this machine, made ready: the browser, PgBouncer and the MariaDB
# client headers mysqlclient builds against (Debian's packages), PostgreSQL, MariaDB, Redis,
# RabbitMQ and NATS started when down, and the test databases created. `make services` runs
# it; `make test` runs it first, and so does CI. `up.sh packages` installs the packages only
# (`make install` runs that before pip builds mysqlclient).
#
# As root it installs and starts what is missing. As another user it only checks, and
# fails naming the one command to run (`sudo make services`), unless SERVICES=optional,
# where a missing service makes its tests skip instead.
set -uo pipefail

SERVICES="${SERVICES:-required}"
missing=()

is_root() { [ "$(id -u)" = 0 ]; }
tcp_up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() {  # wait_for SECONDS COMMAND...: whether COMMAND succeeded within SECONDS
    local seconds=$1; shift
    for _ in $(seq 1 "$seconds"); do "$@" && return 0; sleep 1; done
    "$@"
}

packages() {
    local want=()
    command -v chromium >/dev/null || want+=(chromium)
    command -v chromedriver >/dev/null || want+=(chromium-driver)
    command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || want+=(pgbouncer)
    command -v pkg-config >/dev/null || want+=(pkg-config)
    pkg-config --exists libmariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null \
        || want+=(libmariadb-dev)
    [ ${#want[@]} -eq 0 ] && return 0
    if is_root && command -v apt-get >/dev/null; then
        echo "services: installing ${want[*]} (Debian's packages)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}"; } >/dev/null \
            || missing+=("${want[*]} (apt-get install failed)")
    else
        missing+=("${want[*]}")
    fi
}

start() {  # start NAME PORT COMMAND...: run COMMAND (as root) when nothing listens on PORT
    local name=$1 port=$2; shift 2
    tcp_up "$port" && return 0
    if is_root && command -v "$1" >/dev/null; then
        echo "services: starting $name"
        "$@" >/dev/null 2>&1
        wait_for 60 tcp_up "$port" && return 0
    fi
    missing+=("$name on 127.0.0.1:$port")
}

packages
if [ "${1:-}" = packages ]; then
    [ ${#missing[@]} -eq 0 ] || printf 'services: missing: %s\n' "${missing[@]}" >&2
    exit 0  # pip says what it could not build
fi
start PostgreSQL 5432 pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql 2>/dev/null | head -n 1)" main start
start Redis 6379 redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
start RabbitMQ 5672 rabbitmq-server -detached
start MariaDB 3306 start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
start NATS 4222 start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log

# The databases the suite's URLs name (pytest-django creates its test_* copies itself):
# idempotency_b, _c and _d are lanes B, C and D's (tests/tiers.sh runs four side by side).
LANE_DATABASES="idempotency idempotency_b idempotency_c idempotency_d"
if tcp_up 5432 && command -v psql >/dev/null; then
    wait_for 30 pg_isready -q -h 127.0.0.1 -p 5432 >/dev/null
    for name in $LANE_DATABASES; do
        psql -h 127.0.0.1 -U postgres -qtc "SELECT 1 FROM pg_database WHERE datname = '$name'" | grep -q 1 \
            || psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $name" >/dev/null
    done
fi
if tcp_up 3306 && command -v mariadb >/dev/null; then
    for name in $LANE_DATABASES; do
        mariadb -h 127.0.0.1 -u root -e "CREATE DATABASE IF NOT EXISTS $name CHARACTER SET utf8mb4" 2>/dev/null \
            || missing+=("a MariaDB database '$name' (root, empty password)")
    done
fi

if [ ${#missing[@]} -gt 0 ]; then
    printf 'services: missing: %s\n' "${missing[@]}" >&2
    if [ "$SERVICES" = required ]; then
        echo "services: run 'sudo make services' (installs and starts them), or 'make test SERVICES=optional' to skip their tests." >&2
        exit 1
    fi
fi
exit 0
