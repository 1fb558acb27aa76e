"""The hot path's promises: compiled once per settings change, nothing built for nobody."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

import idempotency_django
from idempotency_django import signals
from idempotency_django._protocol.options import Options, meta_name
from tests.helpers import new_key, post

# The package under test (the installed wheel under tox), not a path beside the tests.
ROOT = Path(idempotency_django.__file__).resolve().parent


def test_the_policy_is_compiled_once_per_settings_change() -> None:
    options = Options.build()
    first = options.resolve()
    assert options.resolve() is first
    with override_settings(IDEMPOTENCY_WAIT=2):
        changed = options.resolve()
        assert changed is not first
        assert changed.wait == 2
        assert options.resolve() is changed
    assert options.resolve().wait == first.wait


def test_the_key_header_is_read_from_meta() -> None:
    assert meta_name("Idempotency-Key") == "HTTP_IDEMPOTENCY_KEY"
    with override_settings(IDEMPOTENCY_HEADER="X-Request-Key"):
        assert Options.build().resolve().meta_header == "HTTP_X_REQUEST_KEY"


@pytest.fixture
def digests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    made: list[tuple[str, str]] = []
    real = signals.key_digest

    def counting(tenant: str, key: str) -> str:
        made.append((tenant, key))
        return real(tenant, key)

    monkeypatch.setattr(signals, "key_digest", counting)
    return made


@pytest.mark.django_db(transaction=True)
def test_a_log_receiver_at_a_disabled_level_counts_as_nobody(
    digests: list[tuple[str, str]],
) -> None:
    """The app's log receiver is connected; at WARNING it logs no outcome: nothing is built."""
    logger = logging.getLogger("idempotency_django")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        assert post(Client(), "/charges/", new_key()).status_code == 201
        assert digests == []
        logger.setLevel(logging.DEBUG)
        key = new_key()
        assert post(Client(), "/charges/", key).status_code == 201
        assert digests == [("", key)]
    finally:
        logger.setLevel(level)


@pytest.mark.django_db(transaction=True)
def test_any_other_receiver_gets_its_outcome(digests: list[tuple[str, str]]) -> None:
    logging.getLogger("idempotency_django").setLevel(logging.WARNING)
    got: list[dict[str, Any]] = []

    def receiver(sender: object, **fields: Any) -> None:
        got.append(fields)

    signals.outcome.connect(receiver)
    try:
        key = new_key()
        assert post(Client(), "/charges/", key).status_code == 201
    finally:
        signals.outcome.disconnect(receiver)
        logging.getLogger("idempotency_django").setLevel(logging.NOTSET)
    assert [f["outcome"] for f in got] == ["executed"]
    assert got[0]["key_digest"] == signals.key_digest("", key)


def test_signals_does_not_import_execution() -> None:
    """The circle execution → signals → execution is gone (not even for type checking)."""
    tree = ast.parse((ROOT / "signals.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "idempotency_django._protocol.execution" not in imported
