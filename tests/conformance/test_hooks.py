"""The test hooks: inert unless IDEMPOTENCY_CONFORMANCE_HOOKS, checked (E150), warned of (W151)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import RequestFactory, override_settings

from idempotency_django._operations import checks, deploy_checks
from idempotency_django.conformance import hooks
from idempotency_django.conformance.hooks import conformance_hooks


def _request(**headers: str) -> HttpRequest:
    return RequestFactory().post("/", b"{}", content_type="application/json", headers=headers)


@conformance_hooks
def view(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"id": 1}, status=201)


def test_the_hooks_are_inert_unless_the_setting_is_on() -> None:
    assert view(_request(**{hooks.FAIL_HEADER: "503"})).status_code == 201
    with override_settings(IDEMPOTENCY_CONFORMANCE_HOOKS="yes"):  # only True turns them on
        assert view(_request(**{hooks.FAIL_HEADER: "503"})).status_code == 201


@override_settings(IDEMPOTENCY_CONFORMANCE_HOOKS=True)
@pytest.mark.parametrize(
    ("asked", "status"), [("503", 503), ("422", 422), ("200", 503), ("x", 503)]
)
def test_the_fail_hook_answers_a_marked_problem(asked: str, status: int) -> None:
    response = view(_request(**{hooks.FAIL_HEADER: asked}))
    assert response.status_code == status
    assert response[hooks.MARKER_HEADER] == "fail"
    assert json.loads(response.content)["status"] == status
    assert view(_request()).status_code == 201  # no header: the view's own answer


@override_settings(IDEMPOTENCY_CONFORMANCE_HOOKS=True)
def test_the_hold_hook_waits_until_released_in_process() -> None:
    answers: list[HttpResponse] = []
    request = _request(**{"Idempotency-Key": "held-1", hooks.HOLD_HEADER: "30"})
    worker = threading.Thread(target=lambda: answers.append(view(request)))
    worker.start()
    assert hooks.wait_entered("held-1", 10)
    assert answers == []  # still held
    hooks.release("held-1")
    worker.join(10)
    hooks.forget("held-1")
    assert answers[0][hooks.MARKER_HEADER] == "hold"


@override_settings(IDEMPOTENCY_CONFORMANCE_HOOKS=True)
def test_a_hold_of_no_time_and_an_async_view_pass_through() -> None:
    from asgiref.sync import async_to_sync

    @conformance_hooks
    async def async_view(request: HttpRequest) -> HttpResponse:
        return HttpResponse(status=201)

    held = async_to_sync(async_view)(_request(**{hooks.HOLD_HEADER: "nonsense"}))
    assert held.status_code == 201
    failed = async_to_sync(async_view)(_request(**{hooks.FAIL_HEADER: "500"}))
    assert failed.status_code == 500
    plain = async_to_sync(async_view)(_request())
    assert plain.status_code == 201


@override_settings(IDEMPOTENCY_CONFORMANCE_HOOKS=True)
def test_a_call_without_a_request_is_left_alone() -> None:
    @conformance_hooks
    def helper(value: Any) -> Any:
        return value

    assert helper(3) == 3


def test_e150_the_setting_must_be_a_bool() -> None:
    assert checks.check_conformance_hooks(True) == []
    [error] = checks.check_conformance_hooks("yes")
    assert error.id == "idempotency_django.E150"
    with override_settings(IDEMPOTENCY_CONFORMANCE_HOOKS=1), pytest.raises(SystemCheckError):
        call_command("check")


def test_w151_check_deploy_warns_when_the_hooks_are_on() -> None:
    assert deploy_checks.check_conformance_hooks_off(False) == []
    with override_settings(IDEMPOTENCY_CONFORMANCE_HOOKS=True):
        ids = [m.id for m in deploy_checks.check_deployment()]
    assert "idempotency_django.W151" in ids
