"""Endpoints for the conformance runner: protected ones on every adapter, and broken toys.

Every protected endpoint creates one ``Charge`` and answers ``{"id": ...}`` with 201;
each offers the test hooks (``conformance_hooks``, on when
``IDEMPOTENCY_CONFORMANCE_HOOKS`` is). Each toy breaks exactly one rule of
docs/http.rst, the rest of it being the real protection, so that the scenario
guarding that rule is the one that must fail.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable

from adrf.views import APIView as AsyncAPIView
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Schema, Status
from ninja.security import APIKeyHeader
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotent
from idempotency_django._protocol.keys import parse_key
from idempotency_django.conformance import conformance_hooks
from idempotency_django.conformance.hooks import FAIL_HEADER, MARKER_HEADER
from idempotency_django.exceptions import IdempotencyError
from idempotency_django.ninja import idempotent as ninja_idempotent
from idempotency_django.rest_framework import IdempotentMixin
from tests.testapp.models import Charge

View_ = Callable[[HttpRequest], HttpResponse]


def _amount(request: HttpRequest) -> int | None:
    try:
        data = json.loads(request.body)
        return int(data["amount"])
    except (ValueError, KeyError, TypeError):
        return None


def create(request: HttpRequest) -> HttpResponse:
    """The business: a charge, 201 with its id; a body it cannot read is a final 400."""
    amount = _amount(request)
    if amount is None:
        return JsonResponse({"error": "send an amount"}, status=400)
    charge = Charge.objects.create(reference="conformance", amount=amount)
    response = JsonResponse({"id": charge.pk, "amount": amount}, status=201)
    response["Location"] = f"/charges/{charge.pk}"
    return response


# --- protected, on every adapter -----------------------------------------------------------------

function_view = csrf_exempt(idempotent(conformance_hooks(create)))


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(idempotent, name="dispatch")
class ChargeView(View):
    @method_decorator(conformance_hooks)
    def post(self, request: HttpRequest) -> HttpResponse:
        return create(request)


class DrfChargeView(IdempotentMixin, APIView):
    @conformance_hooks
    def post(self, request: Request) -> Response:
        amount = request.data.get("amount") if isinstance(request.data, dict) else None
        if not isinstance(amount, int):
            return Response({"error": "send an amount"}, status=400)
        charge = Charge.objects.create(reference="conformance", amount=amount)
        return Response({"id": charge.pk, "amount": amount}, status=201)


class AdrfChargeView(IdempotentMixin, AsyncAPIView):  # type: ignore[misc]
    @conformance_hooks
    async def post(self, request: Request) -> Response:
        amount = request.data.get("amount") if isinstance(request.data, dict) else None
        if not isinstance(amount, int):
            return Response({"error": "send an amount"}, status=400)
        charge = await Charge.objects.acreate(reference="conformance", amount=amount)
        return Response({"id": charge.pk, "amount": amount}, status=201)


class ApiKey(APIKeyHeader):
    param_name = "X-API-Key"

    def authenticate(self, request: HttpRequest, key: str | None) -> str | None:
        return key if key in {"key-alice", "key-bob"} else None


class ChargeIn(Schema):
    amount: int
    currency: str = "eur"


class ChargeOut(Schema):
    id: int
    amount: int


api = NinjaAPI(urls_namespace="conformance-ninja", auth=ApiKey())


@api.post("/charges", response={201: ChargeOut})
@ninja_idempotent
@conformance_hooks
def ninja_charge(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    return Status(201, Charge.objects.create(reference="conformance", amount=payload.amount))


@api.post("/async/charges", response={201: ChargeOut})
@ninja_idempotent
@conformance_hooks
async def ninja_charge_async(request: HttpRequest, payload: ChargeIn) -> Status[Charge]:
    create_charge = sync_to_async(Charge.objects.create)
    return Status(201, await create_charge(reference="conformance", amount=payload.amount))


# --- broken toys: one rule each ------------------------------------------------------------------

unprotected = csrf_exempt(conformance_hooks(create))
"""No protection at all (but the hooks): every retry runs again."""

shared_tenant = csrf_exempt(
    idempotent(tenant=lambda request: "everyone")(conformance_hooks(create))
)
"""Every caller in one key space: a second caller gets the first one's answer."""


def _outside(change: Callable[[HttpRequest, HttpResponse], HttpResponse]) -> View_:
    """The real protection, its answer changed on the way out by ``change``."""
    protected = idempotent(conformance_hooks(create))

    def view(request: HttpRequest) -> HttpResponse:
        return change(request, protected(request))

    return csrf_exempt(view)


def _drop_replay_header(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if "Idempotent-Replayed" in response:
        del response["Idempotent-Replayed"]
    return response


replay_without_header = _outside(_drop_replay_header)


def _runs_marked_retries(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if "Idempotency-Retry" in request.headers:
        return create(request)  # a marked retry executed afresh (a broken early lookup)
    return response


runs_marked_retries = _outside(_runs_marked_retries)

_first_answers: dict[str, bytes] = {}


def _replay_instead_of_422(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    key = request.headers.get("Idempotency-Key", "")
    if response.status_code == 201:
        _first_answers.setdefault(key, response.content)
    if response.status_code == 422 and key in _first_answers:
        replay = HttpResponse(_first_answers[key], status=201, content_type="application/json")
        replay["Idempotent-Replayed"] = "true"
        return replay
    return response


replay_instead_of_422 = _outside(_replay_instead_of_422)


def _runs_despite_bad_key(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if response.status_code == 400 and response["Content-Type"] == "application/problem+json":
        create(request)  # the view ran anyway; the client still gets the 400
    return response


runs_on_bad_key = _outside(_runs_despite_bad_key)


def _status_in_body(view: View_) -> View_:
    """The hook's failure reaches the protection as a 200 carrying the status it asked for."""

    def inner(request: HttpRequest) -> HttpResponse:
        response = view(request)
        if response.has_header(MARKER_HEADER) and response.status_code != 201:
            wanted = response.status_code
            response = JsonResponse({"toy_status": wanted}, status=_disguise(wanted))
            response[MARKER_HEADER] = "fail"
        return response

    return inner


def _disguise(status: int) -> int:
    return 200 if status >= 500 else 503


def _undisguise(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    try:
        wanted = json.loads(response.content).get("toy_status")
    except (ValueError, AttributeError):
        return response
    if wanted:
        response.status_code = int(wanted)
    return response


def _disguised(view: View_) -> View_:
    protected = idempotent(_status_in_body(conformance_hooks(view)))
    return csrf_exempt(lambda request: _undisguise(request, protected(request)))


stores_5xx = _disguised(create)
"""A 503 the protection saw as a 200: stored and replayed."""

_final_as_transient = idempotent(_status_in_body(conformance_hooks(create)))


def final_4xx_not_stored(request: HttpRequest) -> HttpResponse:
    """A final 422 the protection saw as a 503: rolled back and never replayed."""
    response = _final_as_transient(request)
    wanted = response.status_code == 503 and request.headers.get(FAIL_HEADER) == "422"
    if wanted:
        response.status_code = 422
    return response


final_4xx_not_stored = csrf_exempt(final_4xx_not_stored)

waits_when_in_flight = csrf_exempt(idempotent(wait=30)(conformance_hooks(create)))
"""A duplicate in flight waits for the first instead of answering 409 (0.3.0's MariaDB bug)."""


class _NaiveStore:
    """Check, then act: two duplicates that both miss the check both run (the storm's prey).

    The barrier makes the race all but certain: a request that missed waits (up to half
    a second, so that lone requests go on) for another one of the same key to miss too.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: dict[str, HttpResponse] = {}
        self.barriers: dict[str, threading.Barrier] = {}

    def barrier(self, key: str) -> threading.Barrier:
        with self.lock:
            return self.barriers.setdefault(key, threading.Barrier(2, timeout=0.5))


_naive = _NaiveStore()


_refuse_bad_keys = idempotent(create)


@csrf_exempt
def check_then_act(request: HttpRequest) -> HttpResponse:
    raw = request.headers.get("Idempotency-Key")
    try:
        key = parse_key(raw, 255) if raw is not None else None
    except IdempotencyError:
        key = None
    if key is None:
        return _refuse_bad_keys(request)  # the real 400s
    if key in _naive.answers:
        return _replay(_naive.answers[key])
    with contextlib.suppress(threading.BrokenBarrierError):
        _naive.barrier(key).wait()
    response = create(request)
    _naive.answers.setdefault(key, response)
    return response


def _replay(response: HttpResponse) -> HttpResponse:
    replay = HttpResponse(
        response.content, status=response.status_code, content_type="application/json"
    )
    replay["Idempotent-Replayed"] = "true"
    return replay


_protected_create = idempotent(create)


@csrf_exempt
def drops_key(request: HttpRequest) -> HttpResponse:
    """A proxy in front that drops ``Idempotency-Key``: the protection never sees one."""
    request.META.pop("HTTP_IDEMPOTENCY_KEY", None)
    return _protected_create(request)


def _reexecutes_stamping_replayed(business: View_) -> View_:
    """Every duplicate runs again, yet gets the first answer byte for byte with the replay header.

    Only the effects tell: the ids skipped (a gap), or the counter grew.
    """
    lock = threading.Lock()
    answers: dict[str, HttpResponse] = {}

    def view(request: HttpRequest) -> HttpResponse:
        key = request.headers.get("Idempotency-Key")
        if key is None:
            return _refuse_bad_keys(request)
        response = business(request)
        with lock:
            first = answers.setdefault(key, response)
        if first is response:
            return response
        replay = _replay(first)
        if first.has_header("Location"):
            replay["Location"] = first["Location"]
        return replay

    return csrf_exempt(view)


def create_with_string_id(request: HttpRequest) -> HttpResponse:
    """The business, its answer naming the charge ``ch_<uuid>``: ids that cannot be counted."""
    amount = _amount(request)
    if amount is None:
        return JsonResponse({"error": "send an amount"}, status=400)
    Charge.objects.create(reference="conformance", amount=amount)
    ident = f"ch_{uuid.uuid4().hex}"
    response = JsonResponse({"id": ident, "amount": amount}, status=201)
    response["Location"] = f"/charges/{ident}"
    return response


reexecutes_stamping_replayed = _reexecutes_stamping_replayed(create)
reexecutes_stamping_replayed_string_ids = _reexecutes_stamping_replayed(create_with_string_id)
"""The same liar with ``ch_<uuid>`` ids: without a counter nothing shows its second charges."""

string_ids = csrf_exempt(idempotent(conformance_hooks(create_with_string_id)))
"""Correct, with ``ch_<uuid>`` ids: only a counter can show that nothing ran twice."""

keyed_by_request_id = csrf_exempt(idempotent(header="X-Request-ID")(conformance_hooks(create)))
"""Correct, but keyed by ``X-Request-ID``: a runner sending ``Idempotency-Key`` is ignored."""


def count(request: HttpRequest) -> HttpResponse:
    """What ``--count-url`` reads: the charges created so far."""
    return JsonResponse({"count": Charge.objects.count()})
