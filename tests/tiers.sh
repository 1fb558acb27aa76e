#!/usr/bin/env bash
# `make test`'s tiers, in four lanes side by side. The suite waits on servers, workers,
# brokers, browsers and leases as much as it computes: two lanes left the project's two
# cores 40 % idle, four keep them busy. Each lane has databases and Redis numbers of its
# own (below), so no lane sees another's rows, locks or queues. A tier's output is printed
# whole when it ends; then each tier's time, the coverage report of them all, and the
# tiers that failed, by name. TEST_LANES=1 runs every tier in one lane, one after another.
set -uo pipefail
cd "$(dirname "$0")/.."

MAKE="${MAKE:-make}"
SERVICES="${SERVICES:-required}"
PY="${PY:-.venv/bin/python}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432/idempotency}"
MARIADB_URL="${MARIADB_URL:-mysql://root@127.0.0.1:3306/idempotency}"
LOGS=build/tiers

# The lanes, longest first, about even (docs/contributing.rst, "Both cores").
LANE_A=(test-postgres-in-process)
LANE_B=(test-postgres-system)
LANE_C=(test-sqlite test-multidb)
LANE_D=(test-mariadb test-poolers)
TIERS=("${LANE_A[@]}" "${LANE_B[@]}" "${LANE_C[@]}" "${LANE_D[@]}")

rm -rf "$LOGS" && mkdir -p "$LOGS"
: > "$LOGS/times"

run_tier() {  # run_tier LANE TIER: the tier's output kept in its log, printed whole at its end
    local lane=$1 tier=$2 start=$SECONDS status
    "$MAKE" --no-print-directory "$tier" SERVICES="$SERVICES" > "$LOGS/$tier.log" 2>&1
    status=$?
    (
        flock 9
        echo "===== $tier (lane $lane): exit $status after $((SECONDS - start)) s"
        cat "$LOGS/$tier.log"
        printf '%-25s %-5s %6d s  %s\n' "$tier" "$lane" $((SECONDS - start)) \
            "$([ $status -eq 0 ] && echo passed || echo FAILED)" >> "$LOGS/times"
    ) 9> "$LOGS/print.lock"
}

lane() {  # lane NAME TIER...: the tiers one after the other, whichever failed before
    local name=$1 tier
    shift
    for tier in "$@"; do run_tier "$name" "$tier"; done
}

# Each lane's own PostgreSQL and MariaDB databases (PG_URL's and MARIADB_URL's name with
# the lane's suffix; tests/services/up.sh creates them), replay cache (REDIS_URL) and
# worker tests' broker. Not CELERY_BROKER_URL: Celery reads that variable itself, over
# every app's own broker. Lane A keeps the defaults; only lane B starts Celery workers on
# RabbitMQ, and only lane D uses PgBouncer.
on() {  # on SUFFIX REDIS BROKER LANE TIER...: the lane with its own databases
    local suffix=$1 redis=$2 broker=$3
    shift 3
    PG_URL="${PG_URL}${suffix}" MARIADB_URL="${MARIADB_URL}${suffix}" \
        REDIS_URL="redis://127.0.0.1:6379/$redis" \
        IDEMPOTENCY_TEST_CELERY_URL="redis://127.0.0.1:6379/$broker" \
        lane "$@"
}

started=$SECONDS
"$PY" -m coverage erase
if [ "${TEST_LANES:-4}" = 1 ]; then
    lane A "${TIERS[@]}"
else
    lane A "${LANE_A[@]}" &
    on _b 9 8 B "${LANE_B[@]}" &
    on _c 13 10 C "${LANE_C[@]}" &
    on _d 7 6 D "${LANE_D[@]}" &
    wait
fi

"$PY" -m coverage combine -q
"$PY" -m coverage report
covered=$?

echo
echo "make test: each tier's time (the lanes run side by side)"
cat "$LOGS/times"
echo "make test: $((SECONDS - started)) s in all; load average $(cut -d' ' -f1-3 /proc/loadavg)"

failed=""
for tier in "${TIERS[@]}"; do
    grep -q "^$tier .*FAILED$" "$LOGS/times" && failed="$failed $tier"
done
if [ -n "$failed" ]; then
    echo "make test: these tiers failed:$failed (their logs: $LOGS/)" >&2
    exit 1
fi
if [ $covered -ne 0 ]; then
    echo "make test: the coverage report failed (under its gate, pyproject.toml fail_under, or no data)" >&2
fi
exit $covered
