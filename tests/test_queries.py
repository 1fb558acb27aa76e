"""SQL statements per path, counted with Django's query capture and asserted.

Counts are deterministic, so they are tests, not timings. Each test names the
statements in order and states the minimum the design allows. The counts differ
per vendor only where PostgreSQL answers "claim or show me the entry" in one
statement (a CTE) and SQLite needs an INSERT then a SELECT; MySQL and MariaDB
insert first (a new key: one statement) and read only after a duplicate-key
error.

Django (since 4.2) also lists transaction control in the captured queries:
``BEGIN``, ``COMMIT`` and ``ROLLBACK`` appear below next to the SQL statements
because on PostgreSQL each is a round trip of its own (psycopg sends ``BEGIN``
as a separate message before the transaction's first statement). They are not
SQL statements of ours and are counted apart. ``transaction=True`` so that the
claim commits on its own, as in production.

Every path is counted under both protocols (``IDEMPOTENCY_PROTOCOL``): "lease"
on every database (the claim commits on its own, then the view's transaction
takes the row lock) and "lock" on PostgreSQL (the claim is the first statement
of the view's transaction: no separate commit, no row lock, no release).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import path
from django.utils import timezone
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_django._storage.secret import server_secret
from idempotency_django._storage.store import lease, lock, readonly
from idempotency_django._storage.store.sql import Claim, Target
from idempotency_django.models import IdempotencyEntry
from idempotency_django.rest_framework import IdempotentMixin
from tests.factories import IdempotencyEntryFactory
from tests.helpers import charges, new_key, post
from tests.lock_helpers import dsn, lock_id
from tests.testapp.models import Charge
from tests.testapp.views import charge as charge_view

pytestmark = pytest.mark.django_db(transaction=True)
Status = IdempotencyEntry.Status
TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})


@pytest.fixture(autouse=True)
def _secret_read(transactional_db: None) -> None:
    # Read once per process (the first claim's one extra query), never per request.
    server_secret()


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


# "lock" runs under each claim form (store.readonly): read-only prepared (one
# call of the migration's function),
# read-only unprepared (both in one query), and 0.2.0's inserting claim.
LOCK_FORMS = {"lock": ["claim"], "lock-unprepared": ["claim"], "lock-inserting": ["claim"]}
_form: dict[str, list[str]] = {"claim": ["claim"]}


@pytest.fixture(
    params=["lease", *(pytest.param(f, marks=pytest.mark.requires_postgres) for f in LOCK_FORMS)]
)
def protocol(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    form = str(request.param)
    settings.IDEMPOTENCY_PROTOCOL = form.split("-")[0]
    settings.IDEMPOTENCY_PREPARED_STATEMENTS = form != "lock-unprepared"
    _form["claim"] = LOCK_FORMS.get(form, ["claim"])
    enabled, readonly.ENABLED = readonly.ENABLED, form != "lock-inserting"
    yield form.split("-")[0]
    readonly.ENABLED = enabled


def lock_claim() -> list[str]:
    """The "lock" claim's statements under the form being run."""
    return _form["claim"]


class Statements:
    """What one block sent to the entries' database, each statement named by its role."""

    def __init__(self, context: CaptureQueriesContext) -> None:
        self.context = context

    @property
    def kinds(self) -> list[str]:
        """Each statement's kind; a BEGIN or COMMIT sent in a pipeline (prepared statements)
        beside Django's own log of the same transaction control counts once."""
        found: list[str] = []
        for query in self.context.captured_queries:
            k = kind(query["sql"])
            if not (k in TRANSACTION_CONTROL and found and found[-1] == k):
                found.append(k)
        return found

    @property
    def sql(self) -> list[str]:
        """The SQL statements alone, transaction control left out."""
        return [k for k in self.kinds if k not in TRANSACTION_CONTROL]

    @property
    def ours(self) -> list[str]:
        """The statements the protocol adds: everything but the view's own."""
        return [k for k in self.sql if k != "view"]


@contextmanager
def statements() -> Iterator[Statements]:
    with CaptureQueriesContext(connection) as context:
        yield Statements(context)


_ENTRIES = IdempotencyEntry._meta.db_table


def kind(sql: str) -> str:
    """Name a captured statement after what it does in the protocol."""
    if sql == "None":
        # MySQL: Django captures a failed statement as the text "None" (the
        # driver keeps no executed query); ours is the claim's INSERT meeting a
        # duplicate key.
        return "claim"
    text = sql.strip()
    if text.upper() in TRANSACTION_CONTROL:
        return text.upper()
    if re.fullmatch(r"BEGIN ISOLATION LEVEL [A-Z ]+", text):
        return "BEGIN"  # sent alone in a pipeline, before a prepared claim
    # The transaction's BEGIN and COMMIT carried by our first and last statements
    # (store.carry): the statement is what it carries them with.
    text = re.sub(r"^BEGIN[^;]*;\s*", "", text).removesuffix("; COMMIT")
    if "idempotency_django_claim(" in text or (
        "advisory_xact_lock" in text and not text.upper().startswith("WITH")
    ):
        return "claim"  # the read-only claim: its function, or its lock and lookup
    if _ENTRIES not in text:
        return "view"
    verb = text.split(None, 1)[0].upper()
    if verb == "WITH" and text.startswith("WITH updated AS (UPDATE"):
        return "record"  # the record carrying COMMIT: fails on no row (store.sql)
    if verb == "INSERT" and "response_status" in text:
        return "record"  # the read-only claim's one write: the finished entry
    if verb == "WITH" or verb == "INSERT":
        return "claim"
    if verb == "DELETE":
        return "release"
    if verb == "SELECT":
        return "lock" if "FOR UPDATE" in text.upper() else "read"
    assigned = re.search(r"\bSET\s+\W?(\w+)", text, re.IGNORECASE)
    column = assigned.group(1) if assigned else ""
    # SQLite has no row locks: its "lock" writes locked_until to take the write lock.
    return {"status": "record", "fingerprint": "take_over", "locked_until": "lock"}.get(
        column, "other"
    )


def per_vendor(
    postgresql: list[str], sqlite: list[str], mysql: list[str] | None = None
) -> list[str]:
    if connection.vendor == "mysql" and mysql is not None:
        return mysql
    return postgresql if connection.vendor == "postgresql" else sqlite


def refused_end(protocol: str) -> list[str]:
    """How a "lock" claim that is refused (409, 422) ends its transaction: the read-only
    claim wrote nothing and commits (at a ROLLBACK psycopg would deallocate every prepared
    statement); the inserting claim rolls back. "lease" claims in autocommit."""
    if protocol != "lock":
        return []
    return ["COMMIT"] if readonly.ENABLED else ["ROLLBACK"]


def claim_of(protocol: str) -> list[str]:
    """The claim: one CTE on PostgreSQL; SQLite ("lease" only) reads, then inserts."""
    return per_vendor(["claim"], ["read", "claim"], mysql=["claim"])


def lookup(protocol: str) -> list[str]:
    """A claim that finds an entry: "lock" wraps it in the view's transaction (BEGIN …)."""
    if protocol == "lock":
        return ["BEGIN", *lock_claim()]
    return per_vendor(["claim"], ["read"], mysql=["claim", "read"])


def test_first_execution(client: Client, protocol: str) -> None:
    """ "lock": 2 statements of ours (claim, record), in the view's one transaction.

    "lease": 3 (claim, lock, record). Its claim commits on its own before the view
    runs, so an in-flight duplicate sees it and gets 409; the row lock keeps a
    takeover or purge away from a request that outlives its lease; the answer is
    written in the view's transaction, so it commits with the business writes or
    not at all. Under "lock" the claim is the first statement of that transaction:
    the duplicate meets its advisory lock instead, and a crash leaves nothing.
    Round trips on PostgreSQL: those, plus BEGIN and COMMIT of the view's
    transaction (an unprotected view commits too, inside its autocommit INSERT).
    """
    key = new_key()
    with statements() as sent:
        response = post(client, "/charges/", key)
    assert response.status_code == 201
    if protocol == "lock":
        assert sent.kinds == ["BEGIN", *lock_claim(), "view", "record", "COMMIT"]
        assert len(sent.ours) == 1 + len(lock_claim())
    else:
        assert sent.kinds == [*claim_of(protocol), "BEGIN", "lock", "view", "record", "COMMIT"]
        assert len(sent.ours) == (4 if connection.vendor == "sqlite" else 3)


def test_replay_from_the_database(client: Client, protocol: str) -> None:
    """1 statement: the claim's CTE reads the existing entry (SQLite: a plain SELECT).

    MySQL: 2, the INSERT meeting the duplicate key, then the SELECT.

    Under "lock" it runs in a transaction that only reads: BEGIN and COMMIT are
    sent as well (2 round trips more than "lease" on PostgreSQL).
    """
    key = new_key()
    first = post(client, "/charges/", key)
    with statements() as sent:
        replay = post(client, "/charges/", key)
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert len(sent.sql) == len([k for k in lookup(protocol) if k != "BEGIN"])
    assert sent.kinds == [*lookup(protocol), *(["COMMIT"] if protocol == "lock" else [])]


def test_duplicate_of_a_committed_claim_in_progress_is_409_from_the_claim_alone(
    client: Client, protocol: str
) -> None:
    """1 statement: the claim shows the live entry (a "lease" claim, committed)."""
    key = new_key()
    post(client, "/charges/", key)
    IdempotencyEntry.objects.filter(key=key).update(
        status=Status.IN_PROGRESS, locked_until=timezone.now() + timedelta(seconds=60)
    )
    with statements() as sent:
        response = post(client, "/charges/", key)
    assert response.status_code == 409
    assert sent.kinds == [*lookup(protocol), *refused_end(protocol)]


@pytest.mark.requires_postgres
def test_duplicate_of_a_lock_claim_in_flight_is_409_from_the_claim_alone(
    client: Client, protocol: str
) -> None:
    """1 statement: the claim's advisory lock is taken (its row isn't visible yet)."""
    key = new_key()
    with psycopg.connect(dsn()) as holder:  # a "lock" request in flight holds this lock
        holder.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (lock_id(key),))
        with statements() as sent:
            response = post(client, "/charges/", key)
    assert response.status_code == 409
    assert sent.kinds == [*lookup(protocol), *refused_end(protocol)]


def test_reuse_with_another_request_is_answered_422_from_the_claim_alone(
    client: Client, protocol: str
) -> None:
    """1 statement: the fingerprint comes with the entry."""
    key = new_key()
    post(client, "/charges/", key)
    with statements() as sent:
        response = post(client, "/charges/", key, {"amount": 999})
    assert response.status_code == 422
    assert sent.kinds == [*lookup(protocol), *refused_end(protocol)]


@pytest.mark.parametrize("body", [{"status": 503}, {"raise": True}], ids=["5xx", "exception"])
def test_transient_answer_rolls_back_and_releases(
    client: Client, protocol: str, body: dict[str, object]
) -> None:
    """ "lock": 1 statement of ours, the claim; the ROLLBACK takes it away.

    "lease": 3, claim, lock and a release after the ROLLBACK: the claim committed
    on its own, so rolling the view back does not remove it.
    """
    key = new_key()
    with statements() as sent:
        response = post(client, "/charges/", key, body)
    assert response.status_code >= 500
    if protocol == "lock":
        assert sent.kinds == ["BEGIN", *lock_claim(), "view", "ROLLBACK"]
    else:
        assert sent.kinds == [*claim_of(protocol), "BEGIN", "lock", "view", "ROLLBACK", "release"]
    assert charges(key) == 0
    assert not IdempotencyEntry.objects.filter(key=key).exists()


def test_takeover_of_an_abandoned_claim(client: Client, protocol: str) -> None:
    """ "lock": 3 statements of ours (claim, take over, record), in one transaction.

    "lease": 4 (claim or read, take over, lock, record). The claim reads the dead
    entry; the takeover is a separate, fenced UPDATE that skips a row still locked
    by a live transaction. Takeovers only follow a crash under "lease" (or meet a
    claim "lease" left behind).
    """
    key = new_key()
    IdempotencyEntryFactory(key=key, abandoned=True)
    with statements() as sent:
        response = post(client, "/charges/", key)
    assert response.status_code == 201
    if protocol == "lock":
        assert sent.kinds == ["BEGIN", *lock_claim(), "take_over", "view", "record", "COMMIT"]
    else:
        take_over = per_vendor(
            ["claim", "take_over"],
            ["read", "take_over"],
            mysql=["claim", "read", "take_over"],
        )
        assert sent.kinds == [*take_over, "BEGIN", "lock", "view", "record", "COMMIT"]
    assert charges(key) == 1


def test_unprotected_view_for_comparison(client: Client) -> None:
    """The same view without a key (optional): its one INSERT, nothing else."""
    with statements() as sent:
        response = post(client, "/charges/optional/", None)
    assert response.status_code == 201
    assert sent.kinds == ["view"]


@pytest.mark.requires_postgres
def test_lease_claim_relaxes_its_own_commit_only() -> None:
    """The "lease" claim commits asynchronously (README "Performance"); nothing after it does."""
    with statements() as sent:
        claimed = lease.claim(_target(new_key()), bounded=False)
    assert isinstance(claimed, Claim)
    assert "synchronous_commit" in sent.context.captured_queries[0]["sql"]
    assert _synchronous_commit() == "on"


@pytest.mark.requires_postgres
def test_lease_claim_inside_a_callers_transaction_keeps_it_synchronous() -> None:
    """A local setting would last until the caller's COMMIT and relax its writes too."""
    with transaction.atomic():
        assert isinstance(lease.claim(_target(new_key()), bounded=False), Claim)
        assert _synchronous_commit() == "on"


@pytest.mark.requires_postgres
def test_lock_claim_never_relaxes_the_commit_of_the_business_writes() -> None:
    """The "lock" claim commits with the view's writes: it must not touch synchronous_commit."""
    with transaction.atomic(), statements() as sent:
        assert isinstance(lock.claim(_target(new_key()), bounded=True), Claim)
        assert _synchronous_commit() == "on"
    claims = [q["sql"] for q in sent.context.captured_queries if kind(q["sql"]) == "claim"]
    assert len(claims) == 1
    assert "synchronous_commit" not in claims[0]


def _target(key: str) -> Target:
    return Target("default", "", key, "0" * 64, timedelta(seconds=60), timedelta(hours=1))


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])


class _DrfCharge(IdempotentMixin, APIView):
    authentication_classes = ()
    permission_classes = ()

    def post(self, request: Any) -> Response:
        Charge.objects.create(reference=request.headers.get("Idempotency-Key", ""), amount=100)
        return Response({"ok": True}, status=201)


urlpatterns = [path("drf/", _DrfCharge.as_view()), path("charges/", charge_view)]


@pytest.mark.urls(__name__)
def test_the_drf_mixin_sends_what_the_decorator_sends(client: Client, protocol: str) -> None:
    """No SAVEPOINT/RELEASE around the handler: the same statements as a plain view.

    (A handler's IntegrityError is still answered and stored: test_hardening item 7.)
    """
    with statements() as drf:
        assert post(client, "/drf/", new_key()).status_code == 201
    with statements() as plain:
        assert post(client, "/charges/", new_key()).status_code == 201
    assert not [q for q in drf.context.captured_queries if "SAVEPOINT" in q["sql"].upper()]
    assert drf.kinds == plain.kinds
