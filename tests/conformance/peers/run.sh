#!/usr/bin/env bash
# The peers tier: the conformance runner against idempotency packages from PyPI and npm, each
# verdict checked against the effects the package's app recorded itself (issues 40 and 54).
#
# Not in CI: it downloads from PyPI and npm. For each package, a virtualenv (or node_modules)
# of its own and a tiny app wired as the package's README says (apps/: a DRF project, a
# FastAPI app, an Express app, a NestJS app), over a PostgreSQL database of its own: POST /charges/ writes a
# row per run of the view (charges), the app's outermost layer a row per request answered
# (calls), GET /count/ is the runner's --count-url; two callers (Authorization). For each
# profile (strict, draft) the runner runs through stamp.py (its command line, with each
# scenario's start time noted), then judge.py reads the rows straight from PostgreSQL and
# compares every scenario's verdict with what they show. Any disagreement fails the tier.
#
#   tests/conformance/peers/run.sh [package ...]
#
# Results in $WORK: <file>.<profile>.{json,txt,err,stamps.json,judged.json},
# <file>.{timings.tsv,disagreements.txt,server.log} (<file>: the package's name, @scope/name as
# scope-name), peers.rst (the table pasted into docs/verify.rst). Environment: WORK (default
# /tmp/idem-peers), PG (default postgres://postgres@127.0.0.1:5432), REDIS (default
# redis://127.0.0.1:6379/11), PORT_BASE (default 18100), PYTHON (default python3.11),
# RUNNER (the python that runs the runner; default .venv/bin/python), RUNNER_ROOT (the checkout
# whose runner is judged; default this one).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
RUNNER=${RUNNER:-$ROOT/.venv/bin/python}
RUNNER=$(cd "$(dirname "$RUNNER")" && pwd)/$(basename "$RUNNER")  # the Makefile's is relative
WORK=${WORK:-/tmp/idem-peers}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
REDIS=${REDIS:-redis://127.0.0.1:6379/11}
PORT_BASE=${PORT_BASE:-18100}
PYTHON=${PYTHON:-python3.11}
RUNNER_ROOT=${RUNNER_ROOT:-$ROOT}
export PYTHONDONTWRITEBYTECODE=1

# kind | package==version | the runner's flags it needs | what else its app installs
PEERS=(
  "django|django-idempotency-key==1.3.0||"
  "django|djangorestframework-idempotency-key==1.0.3|--key-format uuid|"
  "django|drf-idempotency==1.0.0||"
  "django|drf-idempotencykey==0.2.0|--key-format uuid|"
  "django|drf-idem==0.1.1|--key-header X-Request-ID|redis"
  "asgi|asgi-idempotency-header==0.2.0||redis<5"
  "asgi|fastapi-idempotency==0.1.1||"
  "asgi|idemptx==0.2.2||"
  "express|express-idempotency==1.0.6||express@4 pg@8"
  "nest|@node-idempotency/nestjs==1.0.4||@nestjs/common@10 @nestjs/core@10 @nestjs/platform-express@10 reflect-metadata rxjs@7 pg@8"
)

install() {  # kind, spec, extra, dir
  local kind=$1 spec=$2 extra=$3 dir=$4
  mkdir -p "$dir"
  case $kind in
    django | asgi)
      [ -x "$dir/venv/bin/python" ] && return
      local base="djangorestframework gunicorn"
      [ "$kind" = asgi ] && base="fastapi uvicorn"
      "$PYTHON" -m venv "$dir/venv"
      # shellcheck disable=SC2086  # lists split on purpose
      "$dir/venv/bin/pip" install -q "$spec" $base "psycopg[binary]" $extra ;;
    express | nest)
      [ -d "$dir/node_modules/${spec%%==*}" ] && return
      # shellcheck disable=SC2086
      (cd "$dir" && npm install -s --no-audit --no-fund "${spec/==/@}" $extra) ;;
  esac
}

serve() {  # kind, name, dir, port, db, flags: starts the app in the background, sets PID and CALLERS
  local kind=$1 name=$2 dir=$3 port=$4 db=$5 flags=$6 log="$3.server.log"
  export PEER=$name PEER_DB=$db PEER_DSN="$PG/$db" PEER_REDIS=$REDIS PORT=$port
  export PEER_KEY_HEADER=Idempotency-Key  # the header the app records as the key: the runner's
  if [[ $flags == *--key-header* ]]; then PEER_KEY_HEADER=${flags#*--key-header }; fi
  PEER_KEY_HEADER=${PEER_KEY_HEADER%% *}
  CALLERS=("Authorization: Bearer peer-a" "Authorization: Bearer peer-b")
  case $kind in
    django)
      local app="$HERE/apps/django" tokens
      export DJANGO_SETTINGS_MODULE=peerproject.settings
      (cd "$app" && "$dir/venv/bin/python" -m django migrate -v0 --run-syncdb)
      tokens=$(cd "$app" && "$dir/venv/bin/python" -m django shell -c "$TOKENS" | tail -1)
      CALLERS=("Authorization: Token ${tokens% *}" "Authorization: Token ${tokens#* }")
      "$dir/venv/bin/gunicorn" --chdir "$app" -w 1 -k gthread --threads 8 \
        -b "127.0.0.1:$port" --log-level warning peerproject.wsgi > "$log" 2>&1 & ;;
    asgi)
      psql -q "$PG/$db" -f "$HERE/apps/schema.sql"
      "$dir/venv/bin/uvicorn" --app-dir "$HERE/apps/asgi" --host 127.0.0.1 --port "$port" \
        --log-level warning peerapp:served > "$log" 2>&1 & ;;
    express | nest)
      psql -q "$PG/$db" -f "$HERE/apps/schema.sql"
      NODE_PATH="$dir/node_modules" NODE_ENV=production node "$HERE/apps/$kind/app.js" \
        > "$log" 2>&1 & ;;
  esac
  PID=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/count/" > /dev/null && return; sleep 0.2; done
  echo "$name did not start: $log" >&2
  return 1
}

TOKENS='
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
users = [get_user_model().objects.get_or_create(username=n)[0] for n in ("peer-a", "peer-b")]
print(" ".join(Token.objects.get_or_create(user=u)[0].key for u in users))'

peer() {  # kind, spec, flags, extra, index: install, serve, run both profiles, judge each
  local kind=$1 spec=$2 flags=$3 extra=$4 n=$5
  local name=${spec%%==*} port=$((PORT_BASE + n)) db="idem_peers_${n}" t0=$EPOCHREALTIME
  local file=${name#@}
  file=${file//\//-}  # @scope/name: scope-name
  install "$kind" "$spec" "$extra" "$WORK/$file"
  psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  serve "$kind" "$name" "$WORK/$file" "$port" "$db" "$flags"
  local setup url="http://127.0.0.1:$port"
  setup=$(since "$t0")
  : > "$WORK/$file.timings.tsv"
  : > "$WORK/$file.disagreements.txt"
  for profile in strict draft; do
    local t1=$EPOCHREALTIME out="$WORK/$file.$profile" judged=agrees
    # shellcheck disable=SC2086  # flags split on purpose
    (cd "$RUNNER_ROOT" && PYTHONPATH="$RUNNER_ROOT" "$RUNNER" "$HERE/stamp.py" "$out.stamps.json" \
      -- "$url/charges/" --header "${CALLERS[0]}" --other-caller-header "${CALLERS[1]}" \
      --count-url "$url/count/" --profile "$profile" $flags --json "$out.json") \
      > "$out.txt" 2> "$out.err" || true
    local took
    took=$(since "$t1")
    "$RUNNER" "$HERE/judge.py" "$PG/$db" "$out.json" "$out.stamps.json" "$profile" \
      "$out.judged.json" "$out.err" | tee -a "$WORK/$file.disagreements.txt" || { judged=DISAGREES; FAILED=1; }
    local summary
    summary=$(tail -1 "$out.txt")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$spec" "$profile" "$setup" "$took" \
      "${summary:-no table: $(tail -1 "$out.err")}" "$judged" | tee -a "$WORK/$file.timings.tsv"
  done
  stop
}

since() {  # seconds since an $EPOCHREALTIME, to a tenth
  awk -v t0="$1" -v t1="$EPOCHREALTIME" 'BEGIN { printf "%.1f", t1 - t0 }'
}

stop() {
  [ -n "${PID:-}" ] || return 0
  kill "$PID" 2> /dev/null || true  # it may have died: its log says why
  wait "$PID" 2> /dev/null || true
  PID=
}
trap stop EXIT

main() {  # a function, read whole before it runs: editing this file mid-run is harmless
  mkdir -p "$WORK"
  FAILED=0
  local n=0 entry kind spec flags extra
  for entry in "${PEERS[@]}"; do
    IFS='|' read -r kind spec flags extra <<< "$entry"
    n=$((n + 1))
    if [ $# -gt 0 ] && [[ " $* " != *" ${spec%%==*} "* ]]; then continue; fi
    peer "$kind" "$spec" "$flags" "$extra" "$n"
  done
  "$RUNNER" "$HERE/table.py" "$WORK" "${PEERS[@]}" > "$WORK/peers.rst"
  echo "table: $WORK/peers.rst"
  if [ "$FAILED" != 0 ]; then
    echo "the runner's verdicts and the counted effects disagree: $WORK/*.disagreements.txt" >&2
    return 1
  fi
}

main "$@"
exit
