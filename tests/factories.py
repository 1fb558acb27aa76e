from __future__ import annotations

import uuid
from datetime import timedelta

import factory
from django.utils import timezone

from idempotency_django.models import IdempotencyEntry
from tests.testapp.models import Charge


class IdempotencyEntryFactory(factory.django.DjangoModelFactory[IdempotencyEntry]):
    class Meta:
        model = IdempotencyEntry

    tenant = ""
    key = factory.LazyFunction(lambda: str(uuid.uuid4()))
    fingerprint = "0" * 64
    status = IdempotencyEntry.Status.COMPLETED
    response_status = 201
    response_headers = factory.LazyFunction(lambda: [["Content-Type", "application/json"]])
    response_body = b'{"id": 1}'
    created_at = factory.LazyFunction(timezone.now)
    locked_until = factory.LazyFunction(timezone.now)
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(hours=24))

    class Params:
        in_progress = factory.Trait(
            status=IdempotencyEntry.Status.IN_PROGRESS,
            response_status=None,
            response_headers=factory.LazyFunction(list),
            response_body=None,
            locked_until=factory.LazyFunction(lambda: timezone.now() + timedelta(seconds=60)),
        )
        abandoned = factory.Trait(
            status=IdempotencyEntry.Status.IN_PROGRESS,
            response_status=None,
            response_headers=factory.LazyFunction(list),
            response_body=None,
            locked_until=factory.LazyFunction(lambda: timezone.now() - timedelta(seconds=1)),
        )
        expired = factory.Trait(
            expires_at=factory.LazyFunction(lambda: timezone.now() - timedelta(seconds=1)),
        )


class ChargeFactory(factory.django.DjangoModelFactory[Charge]):
    class Meta:
        model = Charge

    reference = factory.Sequence(lambda n: f"charge-{n}")
    amount = 100
