#!/usr/bin/env bash
# The conformance runner against the Django idempotency packages on PyPI (issue 40).
#
# Not in CI: it downloads from PyPI. For each package, a virtualenv of its own with a tiny
# DRF project (POST /charges/ creates a row and answers {"id", "amount"}; GET /count/ is
# --count-url; two users with tokens), served by gunicorn (one worker, eight threads) on
# 127.0.0.1:$PORT_BASE+n over its own PostgreSQL database; the runner (this checkout's
# .venv) judges it under --profile strict and --profile draft. Results: $WORK/<package>.<profile>.json,
# the table: $WORK/peers.rst (pasted into docs/verify.rst).
#
#   tests/conformance/peers/run.sh [package ...]
#
# Environment: WORK (default /tmp/idem-peers), PG (default postgres://postgres@127.0.0.1:5432),
# REDIS (default redis://127.0.0.1:6379/12, drf-idem's cache), PORT_BASE (default 18100),
# PYTHON (default python3.11).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
RUNNER="$ROOT/.venv/bin/python"
WORK=${WORK:-/tmp/idem-peers}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
REDIS=${REDIS:-redis://127.0.0.1:6379/12}
PORT_BASE=${PORT_BASE:-18100}
PYTHON=${PYTHON:-python3.11}

# package==version | the runner's flags it needs | extra pip packages
PEERS=(
  "django-idempotency-key==1.3.0||"
  "djangorestframework-idempotency-key==1.0.3|--key-format uuid|"
  "drf-idempotency==1.0.0||"
  "drf-idempotencykey==0.2.0|--key-format uuid|"
  "drf-idem==0.1.1|--key-header X-Request-ID|redis"
)

mkdir -p "$WORK"
project() {  # the DRF project, the same for every package but for settings.py's last block
  local dir=$1
  mkdir -p "$dir/peerproject" "$dir/charges"
  touch "$dir/peerproject/__init__.py" "$dir/charges/__init__.py"
  cat > "$dir/peerproject/settings.py" <<'PY'
import os

PEER = os.environ["PEER"]
SECRET_KEY = "peers-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "peerproject.urls"
INSTALLED_APPS = [
    "django.contrib.auth", "django.contrib.contenttypes",
    "rest_framework", "rest_framework.authtoken", "charges",
]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql", "NAME": os.environ["PEER_DB"],
    "USER": "postgres", "HOST": "127.0.0.1", "PORT": "5432",
}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.TokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
# Each package as its README sets it up.
if PEER == "django-idempotency-key":
    MIDDLEWARE.append("idempotency_key.middleware.IdempotencyKeyMiddleware")
elif PEER == "djangorestframework-idempotency-key":
    INSTALLED_APPS.append("rest_framework_idempotency_key")
    MIDDLEWARE.append("rest_framework_idempotency_key.middleware.IdempotencyKeyMiddleware")
elif PEER == "drf-idempotency":
    INSTALLED_APPS.append("drf_idempotency")
    MIDDLEWARE.append("drf_idempotency.middleware.IdempotencyMiddleware")
    IDEMPOTENCY = {"BACKEND": "drf_idempotency.backends.database.DatabaseBackend"}
elif PEER == "drf-idempotencykey":
    INSTALLED_APPS.append("drf_idempotencykey")  # and its mixin on the view
elif PEER == "drf-idem":
    INSTALLED_APPS.append("drf_idem")
    MIDDLEWARE.insert(0, "drf_idem.middleware.IdempotencyMiddleware")
    CACHES["drf_idem"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["PEER_REDIS"],
    }
    DRF_IDEM = {"HEADER": "HTTP_X_REQUEST_ID", "TTL": 60, "CACHE_BACKEND": "drf_idem",
                "ENDPOINTS": [], "METHODS": ["POST", "PUT", "PATCH", "DELETE"]}
PY
  cat > "$dir/peerproject/urls.py" <<'PY'
from django.urls import path

from charges.views import ChargeView, count

urlpatterns = [path("charges/", ChargeView.as_view()), path("count/", count)]
PY
  cat > "$dir/peerproject/wsgi.py" <<'PY'
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peerproject.settings")
application = get_wsgi_application()
PY
  cat > "$dir/charges/models.py" <<'PY'
from django.db import models


class Charge(models.Model):
    amount = models.IntegerField()
PY
  cat > "$dir/charges/views.py" <<'PY'
import os

from django.http import JsonResponse
from rest_framework.response import Response
from rest_framework.views import APIView

from charges.models import Charge


class ChargeView(APIView):
    def post(self, request):
        amount = request.data.get("amount") if isinstance(request.data, dict) else None
        if not isinstance(amount, int):
            return Response({"error": "send an amount"}, status=400)
        charge = Charge.objects.create(amount=amount)
        return Response({"id": charge.pk, "amount": amount}, status=201)


if os.environ["PEER"] == "drf-idempotencykey":
    from drf_idempotencykey.mixins import DrfIdempotencyKeyMixin

    class ChargeView(DrfIdempotencyKeyMixin, ChargeView):
        pass


def count(request):
    return JsonResponse({"count": Charge.objects.count()})
PY
}

TOKENS='
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
users = [get_user_model().objects.get_or_create(username=n)[0] for n in ("peer-a", "peer-b")]
print(" ".join(Token.objects.get_or_create(user=u)[0].key for u in users))'

judge() {  # package==version, flags, extra, index
  local spec=$1 flags=$2 extra=$3 n=$4
  local name=${spec%%==*} port=$((PORT_BASE + n)) db="idem_peer_${n}"
  local venv="$WORK/$name/venv" dir="$WORK/$name/project" t0=$SECONDS
  if [ ! -x "$venv/bin/gunicorn" ]; then
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q "$spec" djangorestframework gunicorn "psycopg[binary]" $extra
  fi
  project "$dir"
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  export PEER=$name PEER_DB=$db PEER_REDIS=$REDIS DJANGO_SETTINGS_MODULE=peerproject.settings
  (cd "$dir" && "$venv/bin/python" -m django migrate -v0 --run-syncdb)
  local tokens token_a token_b
  tokens=$(cd "$dir" && "$venv/bin/python" -m django shell -c "$TOKENS" | tail -1)
  read -r token_a token_b <<< "$tokens"
  "$venv/bin/gunicorn" --chdir "$dir" -w 1 -k gthread --threads 8 -b "127.0.0.1:$port" \
    --log-level warning peerproject.wsgi > "$WORK/$name.gunicorn.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/count/" >/dev/null && break; sleep 0.2; done
  local setup=$((SECONDS - t0))
  for profile in strict draft; do
    local t1=$SECONDS
    # shellcheck disable=SC2086  # flags split on purpose
    "$RUNNER" -m idempotency_django.conformance "http://127.0.0.1:$port/charges/" \
      --header "Authorization: Token $token_a" --other-caller-header "Authorization: Token $token_b" \
      --count-url "http://127.0.0.1:$port/count/" --profile "$profile" $flags \
      --json "$WORK/$name.$profile.json" > "$WORK/$name.$profile.txt" 2>/dev/null || true
    local rows
    rows=$(psql "$PG/$db" -tAc "SELECT count(*) FROM charges_charge")
    echo "$spec $profile: $(tail -1 "$WORK/$name.$profile.txt"); rows so far $rows;" \
      "setup ${setup} s, run $((SECONDS - t1)) s" | tee -a "$WORK/timings.txt"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

: > "$WORK/timings.txt"
n=0
for peer in "${PEERS[@]}"; do
  IFS='|' read -r spec flags extra <<< "$peer"
  n=$((n + 1))
  if [ $# -gt 0 ] && [[ ! " $* " == *" ${spec%%==*} "* ]]; then continue; fi
  judge "$spec" "$flags" "$extra" "$n"
done
"$RUNNER" "$HERE/table.py" "$WORK" "${PEERS[@]}" > "$WORK/peers.rst"
echo "table: $WORK/peers.rst"
