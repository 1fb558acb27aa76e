"""The signals as seen through the public HTTP API: one ``outcome`` per protected request.

Walks every row of SPEC's HTTP table (and the lifecycle paths) and checks the
fields ``idempotency_django.signals`` promises; then shows that receivers which
raise change no answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import IntegrityError, connections
from django.db.models.functions import Now
from django.dispatch import Signal
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import include, path, resolve, reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from idempotency_django import idempotent_call, purge, signals
from idempotency_django._storage import cache
from idempotency_django.calls import namespaced
from idempotency_django.exceptions import KeyReused
from idempotency_django.models import IdempotencyEntry
from tests.factories import IdempotencyEntryFactory
from tests.helpers import charges, new_key, post, unreachable_database

pytestmark = pytest.mark.django_db(transaction=True)
Status = IdempotencyEntry.Status

# The test app's views, plus the admin (for its release action).
urlpatterns = [path("admin/", admin.site.urls), path("", include("tests.testapp.urls"))]

SIGNALS = {
    "outcome": signals.outcome,
    "entry_reclaimed": signals.entry_reclaimed,
    "purge_finished": signals.purge_finished,
    "cache_failed": signals.cache_failed,
}
OUTCOME_FIELDS = {
    "outcome",
    "method",
    "route",
    "status",
    "stored",
    "source",
    "protocol",
    "claim_seconds",
    "waited_seconds",
    "total_seconds",
    "key_digest",
}
LOCAL_CACHE = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "signals"},
}
UNREACHABLE_CACHE = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "unreachable": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
    },
}


@dataclass
class Event:
    signal: str
    sender: object
    fields: dict[str, Any]


class Recorder:
    """Every event of the four signals, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._receivers = [(signal, self._receiver(name)) for name, signal in SIGNALS.items()]

    def _receiver(self, name: str) -> Any:
        def receive(sender: object, signal: Signal, **fields: Any) -> None:
            self.events.append(Event(name, sender, fields))

        return receive

    def take(self, name: str) -> list[Event]:
        """The events of ``name`` since the last take, and forget them."""
        found = [event for event in self.events if event.signal == name]
        self.events = [event for event in self.events if event.signal != name]
        return found

    def one_outcome(self) -> dict[str, Any]:
        """The one ``outcome`` since the last take, checked against the contract's shape."""
        found = self.take("outcome")
        assert len(found) == 1, f"expected exactly one outcome signal, got {found}"
        (event,) = found
        assert event.sender == "http"
        assert set(event.fields) >= OUTCOME_FIELDS
        fields = event.fields
        assert fields["outcome"] in signals.OUTCOMES
        assert isinstance(fields["total_seconds"], float)
        assert fields["total_seconds"] >= 0
        assert isinstance(fields["waited_seconds"], int | float)
        assert fields["waited_seconds"] >= 0
        if fields["protocol"] is None:
            assert fields["claim_seconds"] is None
        else:
            assert fields["protocol"] in {"lock", "lease"}
        if fields["claim_seconds"] is not None:
            assert fields["protocol"] is not None
            assert 0 <= fields["claim_seconds"] <= fields["total_seconds"]
        return fields

    def connect(self) -> None:
        for signal, receiver in self._receivers:
            signal.connect(receiver, weak=False)

    def disconnect(self) -> None:
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    recorder.connect()
    yield recorder
    recorder.disconnect()


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


@pytest.fixture(autouse=True)
def fresh_cache_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "_paused_until", {})


def route(path: str) -> str:
    return resolve(path).view_name


def digest(key: str, tenant: str = "") -> str:
    return signals.key_digest(tenant, key)


def expect(fields: dict[str, Any], **expected: Any) -> None:
    assert {name: fields[name] for name in expected} == expected


# --- Every row of the HTTP table -------------------------------------------------------


def test_first_request_is_executed_and_stored(client: Client, recorder: Recorder) -> None:
    key = new_key()
    assert post(client, "/charges/", key).status_code == 201
    fields = recorder.one_outcome()
    expect(
        fields,
        outcome="executed",
        method="POST",
        route=route("/charges/"),
        status=201,
        stored=True,
        source=None,
        waited_seconds=0,
        key_digest=digest(key),
    )
    assert fields["claim_seconds"] is not None


def test_replay_from_the_database(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key)
    recorder.take("outcome")
    assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"
    fields = recorder.one_outcome()
    expect(
        fields,
        outcome="replayed",
        method="POST",
        route=route("/charges/"),
        status=201,
        stored=None,
        source="database",
        key_digest=digest(key),
    )


def test_a_marked_retrys_replay_is_one_outcome_from_the_database(
    client: Client, recorder: Recorder
) -> None:
    key = new_key()
    post(client, "/charges/", key)
    recorder.take("outcome")
    assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"
    unmarked = recorder.one_outcome()
    assert post(client, "/charges/", key, HTTP_IDEMPOTENCY_RETRY="1")["Idempotent-Replayed"]
    marked = recorder.one_outcome()
    expect(marked, outcome="replayed", status=201, source="database")
    assert marked["protocol"] == unmarked["protocol"] is not None
    assert marked["claim_seconds"] > 0  # the lookup's time, as a claim's


def test_a_marked_retrys_422_reports_its_protocol_as_an_unmarked_one(
    client: Client, recorder: Recorder
) -> None:
    key = new_key()
    post(client, "/charges/", key)
    recorder.take("outcome")
    for marked in ({}, {"HTTP_IDEMPOTENCY_RETRY": "1"}):
        assert post(client, "/charges/", key, {"amount": 1}, **marked).status_code == 422
        fields = recorder.one_outcome()
        expect(fields, outcome="key_reused", status=422)
        assert fields["protocol"] is not None
        assert fields["claim_seconds"] is not None


@override_settings(CACHES=LOCAL_CACHE, IDEMPOTENCY_CACHE="local")
def test_replay_from_the_cache(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key)
    expect(recorder.one_outcome(), outcome="executed", stored=True)
    post(client, "/charges/", key)  # from the database, which fills the cache
    expect(recorder.one_outcome(), outcome="replayed", source="database")
    assert post(client, "/charges/", key)["Idempotent-Replayed"] == "true"
    fields = recorder.one_outcome()
    expect(
        fields,
        outcome="replayed",
        status=201,
        stored=None,
        source="cache",
        protocol=None,
        claim_seconds=None,
        key_digest=digest(key),
    )
    caches["local"].clear()


def test_in_flight_duplicate_is_in_progress(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    recorder.take("outcome")
    assert post(client, "/charges/", key).status_code == 409
    fields = recorder.one_outcome()
    expect(
        fields,
        outcome="in_progress",
        status=409,
        stored=None,
        source=None,
        key_digest=digest(key),
    )
    assert fields["protocol"] is not None


def test_another_request_with_the_key_is_key_reused(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key, {"amount": 1})
    recorder.take("outcome")
    assert post(client, "/charges/", key, {"amount": 2}).status_code == 422
    expect(
        recorder.one_outcome(),
        outcome="key_reused",
        method="POST",
        route=route("/charges/"),
        status=422,
        stored=None,
        source=None,
        key_digest=digest(key),
    )


@override_settings(CACHES=LOCAL_CACHE, IDEMPOTENCY_CACHE="local")
def test_key_reused_found_in_the_cache(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key, {"amount": 1})
    recorder.take("outcome")
    assert post(client, "/charges/", key, {"amount": 2}).status_code == 422
    expect(recorder.one_outcome(), outcome="key_reused", status=422, key_digest=digest(key))
    caches["local"].clear()


def test_a_refused_claim_reports_its_claim_time(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key, {"amount": 1})
    recorder.take("outcome")
    post(client, "/charges/", key, {"amount": 2})
    fields = recorder.one_outcome()
    expect(fields, outcome="key_reused")
    assert fields["claim_seconds"] is not None


@override_settings(IDEMPOTENCY_WAIT=0.1)
def test_a_409_after_waiting_reports_the_wait(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    recorder.take("outcome")
    assert post(client, "/charges/", key).status_code == 409
    fields = recorder.one_outcome()
    expect(fields, outcome="in_progress")
    assert fields["waited_seconds"] > 0


def test_missing_key(client: Client, recorder: Recorder) -> None:
    assert post(client, "/charges/", None).status_code == 400
    expect(
        recorder.one_outcome(),
        outcome="key_missing",
        method="POST",
        route=route("/charges/"),
        status=400,
        stored=None,
        source=None,
        protocol=None,
        claim_seconds=None,
        key_digest=None,
    )


@pytest.mark.parametrize("raw", ["", "a b", "x" * 256, '"unterminated'])
def test_malformed_key(client: Client, recorder: Recorder, raw: str) -> None:
    assert post(client, "/charges/", raw).status_code == 400
    expect(
        recorder.one_outcome(),
        outcome="key_malformed",
        status=400,
        stored=None,
        protocol=None,
        claim_seconds=None,
        key_digest=None,
    )


def test_unreachable_store_is_unavailable(client: Client, recorder: Recorder) -> None:
    key = new_key()
    with unreachable_database():
        assert post(client, "/charges/", key).status_code == 503
    fields = recorder.one_outcome()
    expect(
        fields,
        outcome="unavailable",
        method="POST",
        route=route("/charges/"),
        status=503,
        stored=None,
        source=None,
        key_digest=digest(key),
    )


@pytest.mark.parametrize("status", [500, 503, 408, 429])
def test_transient_answer_is_executed_and_discarded(
    client: Client, recorder: Recorder, status: int
) -> None:
    key = new_key()
    assert post(client, "/charges/", key, {"status": status}).status_code == status
    fields = recorder.one_outcome()
    expect(fields, outcome="executed", status=status, stored=False, key_digest=digest(key))
    assert fields["protocol"] is not None


def test_view_that_raises_is_executed_and_discarded(client: Client, recorder: Recorder) -> None:
    key = new_key()
    assert post(client, "/charges/", key, {"raise": True}).status_code == 500
    # The exception propagates and Django answers it: the core cannot know the status.
    expect(
        recorder.one_outcome(),
        outcome="executed",
        status=None,
        stored=False,
        key_digest=digest(key),
    )


@pytest.mark.parametrize("status", [400, 404, 422])
def test_final_4xx_is_executed_and_stored_then_replayed(
    client: Client, recorder: Recorder, status: int
) -> None:
    key = new_key()
    post(client, "/charges/", key, {"status": status})
    expect(recorder.one_outcome(), outcome="executed", status=status, stored=True)
    post(client, "/charges/", key, {"status": status})
    expect(recorder.one_outcome(), outcome="replayed", status=status, source="database")


def test_another_tenant_gets_its_own_digest(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key)
    anonymous = recorder.one_outcome()["key_digest"]
    user = User.objects.create_user("dora", password="pw")
    client.force_login(user)
    post(client, "/charges/", key)
    fields = recorder.one_outcome()
    expect(fields, outcome="executed", key_digest=digest(key, tenant=str(user.pk)))
    assert fields["key_digest"] != anonymous


def test_unprotected_requests_send_nothing(client: Client, recorder: Recorder) -> None:
    client.get("/charges/cbv/")
    post(client, "/charges/put-only/", new_key())
    assert recorder.take("outcome") == []


@pytest.mark.parametrize("path", ["/charges/cbv/", "/charges/async/", "/webhooks/"])
def test_every_adapter_sends_one_outcome_per_request(
    client: Client, recorder: Recorder, path: str
) -> None:
    key, body = new_key(), {"event_id": new_key()}
    for expected in ("executed", "replayed"):
        post(client, path, key, body)
        expect(recorder.one_outcome(), outcome=expected, method="POST", route=route(path))


def test_drf_mixin_sends_one_outcome_per_request(recorder: Recorder) -> None:
    user = User.objects.create_user("erin", password="pw")
    token, _ = Token.objects.get_or_create(user=user)
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Token {token.key}")
    key = new_key()
    for expected, status in (("executed", 201), ("replayed", 201)):
        assert post(client, "/api/apiview/", key).status_code == status
        expect(
            recorder.one_outcome(),
            outcome=expected,
            method="POST",
            route=route("/api/apiview/"),
            status=status,
            key_digest=digest(key, tenant=str(user.pk)),
        )
    assert post(client, "/api/apiview/", None).status_code == 400
    expect(recorder.one_outcome(), outcome="key_missing", status=400)


# --- The function / context-manager API ---------------------------------------------------


def call_outcome(recorder: Recorder) -> dict[str, Any]:
    found = recorder.take("outcome")
    assert len(found) == 1, f"expected exactly one outcome signal, got {found}"
    assert found[0].sender == "call"
    fields = found[0].fields
    assert set(fields) >= OUTCOME_FIELDS
    expect(fields, method=None, route=None, status=None)
    return fields


def test_calls_send_one_outcome_each(recorder: Recorder) -> None:
    key = new_key()
    digest_of_call = signals.key_digest("", namespaced("signals", key))
    for expected, stored, source in (("executed", True, None), ("replayed", None, "database")):
        with idempotent_call(key, scope="signals", arguments={"n": 1}) as call:
            if not call.replayed:
                call.result = {"ok": True}
        expect(
            call_outcome(recorder),
            outcome=expected,
            stored=stored,
            source=source,
            key_digest=digest_of_call,
        )
    with pytest.raises(KeyReused), idempotent_call(key, scope="signals", arguments={"n": 2}):
        pass
    expect(call_outcome(recorder), outcome="key_reused", stored=None)


def test_a_call_that_raises_is_executed_and_discarded(recorder: Recorder) -> None:
    with (
        pytest.raises(RuntimeError),
        idempotent_call(new_key(), scope="signals"),
    ):
        raise RuntimeError("the body failed")
    expect(call_outcome(recorder), outcome="executed", stored=False)


def test_a_call_whose_commit_fails_is_not_reported_stored(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferred constraint, say, fails the commit after the body: nothing was stored."""

    def failing_commit() -> None:
        raise IntegrityError("a deferred constraint failed at commit")

    key = new_key()
    with pytest.raises(IntegrityError), idempotent_call(key, scope="signals") as call:
        monkeypatch.setattr(connections["default"], "commit", failing_commit)
        call.result = {"ok": True}
    monkeypatch.undo()
    expect(call_outcome(recorder), outcome="executed", stored=False)
    assert not IdempotencyEntry.objects.filter(status=IdempotencyEntry.Status.COMPLETED).exists()


def test_a_replayed_call_whose_caller_raises_is_still_a_replay(recorder: Recorder) -> None:
    key = new_key()
    with idempotent_call(key, scope="signals") as call:
        call.result = {"ok": True}
    recorder.take("outcome")
    with pytest.raises(RuntimeError), idempotent_call(key, scope="signals") as call:
        assert call.replayed
        raise RuntimeError("the caller failed after reading the stored result")
    expect(call_outcome(recorder), outcome="replayed", stored=None, source="database")


# --- Lifecycle paths ---------------------------------------------------------------------


def test_takeover_of_an_abandoned_claim(client: Client, recorder: Recorder) -> None:
    key = new_key()
    IdempotencyEntryFactory.create(key=key, abandoned=True)
    assert post(client, "/charges/", key).status_code == 201
    expect(recorder.one_outcome(), outcome="executed", stored=True, key_digest=digest(key))
    (reclaimed,) = recorder.take("entry_reclaimed")
    expect(reclaimed.fields, how="takeover", count=1, database="default")
    assert charges(key) == 1


def test_entry_past_its_ttl_runs_afresh(client: Client, recorder: Recorder) -> None:
    key = new_key()
    post(client, "/charges/", key)
    recorder.take("outcome")
    IdempotencyEntry.objects.filter(key=key).update(expires_at=Now() - timedelta(seconds=1))
    assert post(client, "/charges/", key).status_code == 201
    expect(recorder.one_outcome(), outcome="executed", stored=True)
    assert recorder.take("entry_reclaimed") == []
    assert charges(key) == 2


def test_purge_sends_one_summary_and_one_reclaim_per_batch(recorder: Recorder) -> None:
    IdempotencyEntryFactory.create_batch(3, expired=True)
    IdempotencyEntryFactory.create_batch(2, abandoned=True)
    assert purge.purge() == purge.PurgeResult(expired=3, abandoned=2)
    (finished,) = recorder.take("purge_finished")
    expect(finished.fields, expired=3, abandoned=2, dry_run=False, database="default")
    assert finished.fields["seconds"] >= 0
    reclaimed = recorder.take("entry_reclaimed")
    assert [event.fields["how"] for event in reclaimed] == ["purge"] * len(reclaimed)
    assert sum(event.fields["count"] for event in reclaimed) == 2
    assert recorder.take("outcome") == []


def test_dry_run_purge_reclaims_nothing(recorder: Recorder) -> None:
    IdempotencyEntryFactory.create_batch(2, abandoned=True)
    assert purge.purge(dry_run=True) == purge.PurgeResult(0, 2, dry_run=True)
    (finished,) = recorder.take("purge_finished")
    expect(finished.fields, expired=0, abandoned=2, dry_run=True)
    assert recorder.take("entry_reclaimed") == []


@pytest.mark.urls(__name__)
def test_admin_release_is_a_reclaim(admin_client: Client, recorder: Recorder) -> None:
    stuck = IdempotencyEntryFactory.create_batch(2, abandoned=True)
    live = IdempotencyEntryFactory.create(in_progress=True)
    data = {"action": "release_stuck", "_selected_action": [e.pk for e in [*stuck, live]]}
    changelist = reverse("admin:idempotency_django_idempotencyentry_changelist")
    admin_client.post(changelist, data, follow=True)
    reclaimed = recorder.take("entry_reclaimed")
    assert [event.fields["how"] for event in reclaimed] == ["admin"] * len(reclaimed)
    assert sum(event.fields["count"] for event in reclaimed) == 2


@override_settings(CACHES=UNREACHABLE_CACHE, IDEMPOTENCY_CACHE="unreachable")
def test_unreachable_cache_sends_cache_failed_and_one_outcome(
    client: Client, recorder: Recorder
) -> None:
    key = new_key()
    assert post(client, "/charges/", key).status_code == 201
    expect(recorder.one_outcome(), outcome="executed", stored=True)
    failures = recorder.take("cache_failed")
    assert len(failures) == 1  # the get; the set is skipped while the alias is paused
    expect(failures[0].fields, alias="unreachable", operation="get")
    assert isinstance(failures[0].fields["error"], Exception)


# --- A receiver that raises changes no answer ---------------------------------------------


@pytest.fixture
def raising_receivers() -> Iterator[None]:
    def explode(sender: object, **fields: Any) -> None:
        raise RuntimeError("a broken metrics receiver")

    for signal in SIGNALS.values():
        signal.connect(explode, weak=False, dispatch_uid="tests.raising")
    yield
    for signal in SIGNALS.values():
        signal.disconnect(dispatch_uid="tests.raising")


def answers(client: Client) -> list[tuple[int, str | None, bool]]:
    """One request per row of the table: (status, problem type or replay marker, body is JSON)."""
    key, busy = new_key(), new_key()
    sent = [
        post(client, "/charges/", key),
        post(client, "/charges/", key),
        post(client, "/charges/", key, {"amount": 5}),
        post(client, "/charges/", None),
        post(client, "/charges/", "a b"),
        post(client, "/charges/", new_key(), {"status": 503}),
        post(client, "/charges/", new_key(), {"raise": True}),
        post(client, "/charges/", new_key(), {"status": 404}),
        post(client, "/charges/", busy),
    ]
    IdempotencyEntry.objects.filter(key=busy).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    sent.append(post(client, "/charges/", busy))
    with unreachable_database():
        sent.append(post(client, "/charges/", new_key()))
    return [(r.status_code, _marker(r), _is_json(r)) for r in sent]


def _marker(response: HttpResponse) -> str | None:
    if response.get("Content-Type") == "application/problem+json":
        return str(json.loads(response.content)["type"]).rsplit("#", 1)[-1]
    return response.get("Idempotent-Replayed")


def _is_json(response: HttpResponse) -> bool:
    try:
        json.loads(response.content)
    except ValueError:
        return False
    return True


EXPECTED_ANSWERS = [
    (201, None, True),
    (201, "true", True),
    (422, "key-reused", True),
    (400, "key-missing", True),
    (400, "key-malformed", True),
    (503, None, True),
    (500, None, False),
    (404, None, True),
    (201, None, True),
    (409, "in-progress", True),
    (503, "unavailable", True),
]


def test_the_table_answers_as_specified(client: Client) -> None:
    assert answers(client) == EXPECTED_ANSWERS


def test_raising_receivers_change_no_answer(
    client: Client, raising_receivers: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="idempotency_django")
    assert answers(client) == EXPECTED_ANSWERS
    raised = [r for r in caplog.records if "receiver" in r.getMessage()]
    assert len(raised) >= len(EXPECTED_ANSWERS)
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in raised)


def test_raising_receivers_change_no_purge(raising_receivers: None) -> None:
    IdempotencyEntryFactory.create_batch(2, expired=True)
    IdempotencyEntryFactory.create(abandoned=True)
    assert purge.purge() == purge.PurgeResult(expired=2, abandoned=1)
    assert not IdempotencyEntry.objects.exists()
