"""A protected view may change who the caller is on purpose: a sign-up that calls
``login()``, a delete-my-account that calls ``logout()``.

Its key is claimed, and its answer recorded, in the key space of the caller who sent
the request (the tenant resolved before the view), where that caller's retry finds
it. A view that authenticates the caller any other way after ``@idempotent`` resolved
the tenant still fails loudly (the key was claimed in the wrong key space).
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import login, logout
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django import idempotent
from idempotency_django.models import IdempotencyEntry
from idempotency_django.rest_framework import IdempotentMixin
from tests.helpers import new_key, post

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]


@idempotent
def sign_up(request: HttpRequest) -> JsonResponse:
    name = json.loads(request.body)["name"]
    user = User.objects.create_user(name, password="pw")
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return JsonResponse({"id": user.pk}, status=201)


@idempotent
def delete_my_account(request: HttpRequest) -> JsonResponse:
    user = request.user
    logout(request)
    user.delete()
    return JsonResponse({"deleted": True})


@idempotent
def authenticates_late(request: HttpRequest) -> JsonResponse:
    request.user = User.objects.get(username=request.headers["X-User"])  # no login()
    return JsonResponse({}, status=201)


@api_view(["POST"])
@authentication_classes([SessionAuthentication])
@permission_classes([])
@idempotent
def drf_sign_up(request: Request) -> Response:
    user = User.objects.create_user(json.loads(request.body)["name"], password="pw")
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")  # DRF's request
    return Response({"id": user.pk}, status=201)


class MixinSignUp(IdempotentMixin, APIView):
    authentication_classes = (SessionAuthentication,)
    permission_classes = ()

    def post(self, request: Request) -> Response:
        user = User.objects.create_user(json.loads(request.body)["name"], password="pw")
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return Response({"id": user.pk}, status=201)


urlpatterns = [
    path("sign-up/", sign_up),
    path("mixin/sign-up/", MixinSignUp.as_view()),
    path("drf/sign-up/", drf_sign_up),
    path("delete-my-account/", delete_my_account),
    path("late/", authenticates_late),
]


@pytest.mark.parametrize("path", ["/sign-up/", "/drf/sign-up/", "/mixin/sign-up/"])
def test_a_sign_up_that_logs_the_new_user_in_is_protected(path: str) -> None:
    key = new_key()
    first = post(Client(), path, key, {"name": "newcomer"})
    # The answer never reached the client (no session cookie): its retry is anonymous.
    retry = post(Client(), path, key, {"name": "newcomer"})

    assert first.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert User.objects.filter(username="newcomer").count() == 1
    assert IdempotencyEntry.objects.get(key=key).tenant == ""  # the caller who sent it


def test_a_delete_my_account_that_logs_the_user_out_is_protected() -> None:
    user = User.objects.create_user("leaving", password="pw")
    client = Client()
    client.force_login(user)
    key = new_key()

    first = post(client, "/delete-my-account/", key)

    assert first.status_code == 200
    assert not User.objects.filter(username="leaving").exists()
    assert IdempotencyEntry.objects.get(key=key).tenant == str(user.pk)


def test_a_view_that_authenticates_the_caller_late_still_fails_loudly() -> None:
    User.objects.create_user("someone", password="pw")
    with pytest.raises(ImproperlyConfigured, match="not through login"):
        post(Client(), "/late/", new_key(), HTTP_X_USER="someone")
    assert not IdempotencyEntry.objects.exists()
