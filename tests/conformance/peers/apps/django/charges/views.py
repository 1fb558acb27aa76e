import json
import os
import time

from django.http import JsonResponse
from rest_framework.response import Response
from rest_framework.views import APIView

from charges.models import Call, Charge

PEER = os.environ["PEER"]
KEY_HEADER = os.environ.get("PEER_KEY_HEADER", "Idempotency-Key")


def caller(request):
    return request.headers.get("Authorization", "")


class ChargeView(APIView):
    def post(self, request):
        amount = request.data.get("amount") if isinstance(request.data, dict) else None
        row = {"key": request.headers.get(KEY_HEADER), "caller": caller(request), "at": time.time()}
        if not isinstance(amount, int):
            Charge.objects.create(status=400, **row)
            return Response({"error": "send an amount"}, status=400)
        charge = Charge.objects.create(amount=amount, status=201, **row)
        return Response({"id": charge.pk, "amount": amount}, status=201)


if PEER == "djangorestframework-idempotency-key":
    from rest_framework_idempotency_key.decorators import simple_idempotency_key_method

    class ChargeView(ChargeView):  # its decorator stores and replays; the middleware only locks
        @simple_idempotency_key_method
        def post(self, request):
            return super().post(request)

elif PEER == "drf-idempotencykey":
    from drf_idempotencykey.mixins import DrfIdempotencyKeyMixin

    class ChargeView(DrfIdempotencyKeyMixin, ChargeView):
        pass


def count(request):
    return JsonResponse({"count": Charge.objects.filter(status=201).count()})


def wire(get_response):
    """The outermost middleware: every POST /charges/ and its answer, whoever answered it."""

    def middleware(request):
        if request.method != "POST" or request.path != "/charges/":
            return get_response(request)
        arrived, key = time.time(), request.headers.get(KEY_HEADER)
        response = get_response(request)
        Call.objects.create(
            key=key,
            caller=caller(request),
            status=response.status_code,
            answer_id=answer_id(response.content),
            at=arrived,
        )
        return response

    return middleware


def answer_id(body):
    try:
        data = json.loads(body)
    except ValueError:
        return None
    ident = data.get("id") if isinstance(data, dict) else None
    return ident if isinstance(ident, int) else None
