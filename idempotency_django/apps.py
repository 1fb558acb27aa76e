from __future__ import annotations

from importlib.util import find_spec

from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "idempotency_django"
    label = "idempotency_django"
    verbose_name = "Idempotency"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from idempotency_django._operations import checks, deploy_checks  # noqa: F401  (registers them)

        if find_spec("rest_framework") and find_spec("drf_spectacular"):
            from idempotency_django._adapters import spectacular  # noqa: F401  (registers the extension)

        from idempotency_django._operations import log  # the log lines are receivers of the signals

        log.connect()

        from django.db.models.signals import post_migrate

        from idempotency_django._storage import secret

        post_migrate.connect(secret.on_post_migrate, sender=self, dispatch_uid="idempotency_secret")
