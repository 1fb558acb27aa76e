"""The install extras of the optional integrations, and the hint when one is missing."""

from __future__ import annotations

from typing import NoReturn

# extra -> (the top-level module it installs, what to call it in a message)
EXTRAS = {
    "drf": ("rest_framework", "Django REST framework"),
    "celery": ("celery", "Celery"),
    "ninja": ("ninja", "Django Ninja"),
    "tasks": ("django_tasks", "the django-tasks backport of django.tasks (Django 5.2)"),
    "httpx": ("httpx", "httpx"),
    "requests": ("requests", "requests"),
    "strawberry": ("strawberry", "Strawberry GraphQL"),
    "graphene": ("graphene", "Graphene"),
    "mcp": ("mcp_server", "django-mcp-server"),
}


def raise_missing_extra(error: ModuleNotFoundError, module: str, extra: str) -> NoReturn:
    """Re-raise ``error`` from importing ``module``, saying which extra to install.

    Only when the missing module is the extra's own: any other missing module is
    another problem, and ``error`` is raised unchanged.
    """
    needed, name = EXTRAS[extra]
    if (error.name or "").partition(".")[0] != needed:
        raise error
    raise ModuleNotFoundError(
        f"{module} needs {name}, which is not installed: pip install 'idempotency-django[{extra}]'",
        name=error.name,
    ) from error
