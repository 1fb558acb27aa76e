"""The flush after a transactional test (tests/flush.py): the tests' rows go, the registry stays."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db.models.signals import post_migrate
from django.test import TransactionTestCase

from idempotency_django._storage import secret
from idempotency_django.models import IdempotencyDatabase, IdempotencyEntry, IdempotencySecret
from tests import flush
from tests.factories import IdempotencyEntryFactory

pytestmark = pytest.mark.django_db(transaction=True)


class _Case(TransactionTestCase):
    __test__ = False  # a case to call the teardown on, not one to collect

    def runTest(self) -> None:  # a TestCase needs a method to be made
        pass


def test_the_flush_empties_the_tests_tables_and_keeps_the_registry() -> None:
    registry = _registry()
    assert all(registry)
    IdempotencyEntryFactory()
    user = User.objects.create(username="flushed")
    user.user_permissions.add(Permission.objects.earliest("pk"))
    identity = secret.row_identity("default")

    flush.keep_the_registry(_Case())

    assert not IdempotencyEntry.objects.exists()
    assert not User.objects.exists()
    assert _registry() == registry  # the same rows, not rows made again
    # The other receivers of post_migrate ran: the package's wrote its rows back.
    assert bytes.fromhex(IdempotencyDatabase.objects.get().identity) == identity
    assert IdempotencySecret.objects.exists()


def test_the_flush_leaves_the_registrys_receivers_connected() -> None:
    """The next real migrate (a test that runs one) still writes content types and permissions."""
    before = _receivers()
    flush.keep_the_registry(_Case())
    assert _receivers() == before
    assert set(_table_names()) >= flush.REGISTRY_TABLES


def test_it_is_the_teardown_every_transactional_test_gets() -> None:
    assert TransactionTestCase._fixture_teardown is flush.keep_the_registry  # type: ignore[attr-defined]


def _registry() -> tuple[set[int], set[int]]:
    return (
        set(ContentType.objects.values_list("pk", flat=True)),
        set(Permission.objects.values_list("pk", flat=True)),
    )


def _receivers() -> set[object]:
    return {lookup_key for lookup_key, *_ in post_migrate.receivers}


def _table_names() -> list[str]:
    from django.db import connection

    return list(connection.introspection.table_names())
