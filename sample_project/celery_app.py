"""The sample's Celery app: ``celery -A sample_project.celery_app worker -l INFO`` (see docs/tasks.rst).

Without ``CELERY_BROKER_URL`` in the environment, tasks run eagerly in the web
process, so ``make run`` needs no broker.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sample_project.settings")

app = Celery("sample_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
