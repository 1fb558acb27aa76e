"""Create the sample's demo user (demo/demo) and its API token, once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token


def demo_token() -> str:
    """The demo user's API token, creating the user (password ``demo``) and token if missing."""
    user, created = get_user_model().objects.get_or_create(
        username="demo", defaults={"is_staff": True, "is_superuser": True}
    )
    if created:
        user.set_password("demo")
        user.save()
    token, _ = Token.objects.get_or_create(user=user)
    return str(token.key)


class Command(BaseCommand):
    help = "Create the demo user (password 'demo') and print its API token."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"demo user: demo / demo   API token: {demo_token()}")
