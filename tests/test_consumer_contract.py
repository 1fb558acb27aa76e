"""Consumers, every way a message can fail: one table, run over every preset with a broker
here (RabbitMQ, NATS JetStream, Redis Streams), the consumer a separate process on
PostgreSQL (tests/consumer_harness.py has the scenarios and the handler).

============================================  =============================================
the message                                   expected
============================================  =============================================
its handler raises                            ``max_attempts`` runs, a dead letter, its key
                                              free; the event behind it handled
its handler meets a database error of its     the same: a statement timeout, a deadlock are
own (statement timeout, deadlock)             failures, never "the store is away"
its handler kills its process (SIGKILL)       ``max_attempts`` runs, then a dead letter
                                              without running
its id cannot be stored (too long, a NUL)     a dead letter, never run, the consumer alive
it meets a database outage                    retried, never counted; each once after
it is killed after the commit, before the ack replayed: one effect
two consumers race it (two deliveries)        one run, one effect, both acked
============================================  =============================================

Every dead letter reaches the broker's dead-letter path (where an operator looks).
Celery, Kafka and SQS (and the three above, as their translation): the in-process table,
tests/test_consumer_contract_inprocess.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import consumer_harness as harness
from tests.celery_harness import database_url
from tests.test_consumer_nats import JetStream, stream  # noqa: F401 - fixtures
from tests.test_consumer_rabbitmq import rabbit  # noqa: F401
from tests.test_consumer_redis_streams import streams  # noqa: F401

pytestmark = [
    pytest.mark.requires_postgres,
    pytest.mark.system,
    pytest.mark.django_db(transaction=True),
]

SCENARIOS: dict[str, Callable[[Any, Path, str], None]] = {
    "the handler raises": harness.poison_is_dead_lettered_and_leaves_its_key_free,
    "a database error of its own": harness.database_errors_of_the_handler_are_counted_then_dead_lettered,
    "the handler kills its process": harness.killed_inside_the_handler_is_dead_lettered_after_max_attempts_runs,
    "an id the store cannot hold": harness.unstorable_ids_are_dead_lettered_and_the_next_handled,
    "a database outage": harness.database_outage_mid_stream,
    "killed after the commit": harness.killed_after_the_commit_and_before_the_ack,
    "two consumers race": harness.two_consumers_race_one_message,
}


@pytest.fixture(params=["rabbitmq", "nats", "redis_streams"])
def broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Each broker's adapter (tests/test_consumer_<broker>.py), its names its own."""
    if request.param == "rabbitmq":
        yield request.getfixturevalue("rabbit")
    elif request.param == "nats":
        yield JetStream(request.getfixturevalue("stream"))
    else:
        yield request.getfixturevalue("streams")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_way_a_message_can_fail_ends_in_one_effect_or_a_dead_letter(
    scenario: str, broker: Any, tmp_path: Path
) -> None:
    SCENARIOS[scenario](broker, tmp_path, database_url())
