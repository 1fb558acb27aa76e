from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.test.testcases import LiveServerThread

from tests.testapp.models import Charge


@pytest.fixture
def hooks_on(settings: Any) -> None:
    settings.IDEMPOTENCY_CONFORMANCE_HOOKS = True


@pytest.fixture
def callers(django_user_model: Any) -> tuple[Client, Client]:
    """Two callers, each logged in as a user of their own and with a Ninja API key."""
    first = Client(headers={"X-API-Key": "key-alice"})
    first.force_login(django_user_model.objects.create(username="conformance-a"))
    second = Client(headers={"X-API-Key": "key-bob"})
    second.force_login(django_user_model.objects.create(username="conformance-b"))
    return first, second


def executions() -> int:
    return Charge.objects.count()


@pytest.fixture
def http_server(transactional_db: None) -> Iterator[str]:
    """The test project over real HTTP, in this process (threads, each its own connection).

    pytest-django's ``live_server`` wraps it in a static files handler this project's
    settings (no ``STATIC_URL``) break; Django's server thread without it does.
    """
    server = LiveServerThread("127.0.0.1", _bare, port=0)  # type: ignore[arg-type]
    server.daemon = True
    server.start()
    server.is_ready.wait()
    if server.error:
        raise server.error
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.terminate()


def _bare(handler: Any) -> Any:
    return handler
