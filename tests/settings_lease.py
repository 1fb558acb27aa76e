"""tests.settings under the "lease" protocol with a short lease: a db_worker's claim commits
first and outlives a killed worker for 5 seconds (tests/test_django_tasks_worker.py)."""

from tests.settings import *  # noqa: F403

IDEMPOTENCY_PROTOCOL = "lease"
IDEMPOTENCY_LEASE = 5
