#!/usr/bin/env bash
# `make test`'s tiers, in two lanes side by side (one per core of the project's 2-core
# machine): PostgreSQL's pass, the longest, beside SQLite, MariaDB, the multi-database and
# the pooler tiers. Each lane has databases and Redis numbers of its own, so neither sees
# the other's rows, locks or queues. A tier's output is printed whole when it ends; then
# each tier's time, the coverage report of them all, and the tiers that failed, by name.
# TEST_LANES=1 runs every tier in one lane, one after the other.
set -uo pipefail
cd "$(dirname "$0")/.."

MAKE="${MAKE:-make}"
SERVICES="${SERVICES:-required}"
PY="${PY:-.venv/bin/python}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432/idempotency}"
LOGS=build/tiers
LANE_A=(test-postgres)
LANE_B=(test-sqlite test-mariadb test-multidb test-poolers)

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
        printf '%-15s %-5s %6d s  %s\n' "$tier" "$lane" $((SECONDS - start)) \
            "$([ $status -eq 0 ] && echo passed || echo FAILED)" >> "$LOGS/times"
    ) 9> "$LOGS/print.lock"
}

lane() {  # lane NAME TIER...: the tiers one after the other, whichever failed before
    local name=$1 tier
    shift
    for tier in "$@"; do run_tier "$name" "$tier"; done
}

# Lane B's own PostgreSQL database (tests/services/up.sh creates it), replay cache and
# worker tests' broker; its MariaDB and PgBouncer are its own already (lane A uses neither).
# Not CELERY_BROKER_URL: Celery reads that variable itself, over every app's own broker.
lane_b() {
    PG_URL="${PG_URL}_b" REDIS_URL=redis://127.0.0.1:6379/13 \
        IDEMPOTENCY_TEST_CELERY_URL=redis://127.0.0.1:6379/10 \
        lane B "${LANE_B[@]}"
}

started=$SECONDS
"$PY" -m coverage erase
if [ "${TEST_LANES:-2}" = 1 ]; then
    lane A "${LANE_A[@]}" "${LANE_B[@]}"
else
    lane A "${LANE_A[@]}" &
    lane_b &
    wait
fi

"$PY" -m coverage combine -q
"$PY" -m coverage report
covered=$?

echo
echo "make test: each tier's time (lanes A and B run side by side)"
cat "$LOGS/times"
echo "make test: $((SECONDS - started)) s in all; load average $(cut -d' ' -f1-3 /proc/loadavg)"

failed=""
for tier in "${LANE_A[@]}" "${LANE_B[@]}"; do
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
