"""``manage.py inspect_idempotency KEY``: what is held for a key; ``--release`` frees a stuck one."""

from __future__ import annotations

import sys
from http import HTTPStatus
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_django import lookup
from idempotency_django._protocol.keys import readable
from idempotency_django._storage import seal
from idempotency_django.databases import default_alias
from idempotency_django.forms import session_tenant
from idempotency_django.management.arguments import check_database


class Command(BaseCommand):
    help = (
        "Show the idempotency entry of a tenant's key: status, times, response status, sizes "
        "and protocol (the stored body only with --show-body); --release frees an in-progress "
        "one whose lease has passed, as the admin's action does."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "key", help='The key as the client sent it, or a task\'s "[scope] key" as listed.'
        )
        whose = parser.add_mutually_exclusive_group()
        whose.add_argument("--tenant", default="", help='Whose key it is (default "").')
        whose.add_argument(
            "--credential",
            metavar="VALUE",
            help="Whose key it is, for a Django Ninja caller whose auth returned a string "
            "(an API key): that string, or - to read it from standard input.",
        )
        whose.add_argument(
            "--session",
            metavar="SESSION_KEY",
            help="Whose key it is, for an anonymous visitor's form post: their session key "
            "(the value of their session cookie).",
        )
        parser.add_argument("--scope", help="The scope of a call's or task's key.")
        parser.add_argument(
            "--database",
            metavar="ALIAS",
            help="Database alias holding the entries (default IDEMPOTENCY_DATABASE).",
        )
        parser.add_argument(
            "--show-body", action="store_true", help="Also print the stored response body."
        )
        parser.add_argument(
            "--release",
            action="store_true",
            help="Delete the entry if it is in progress, past its lease and held by no request.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        key, tenant, database = options["key"], options["tenant"], options["database"]
        check_database(database)
        using = database or default_alias()
        if options["credential"] is not None:
            tenant = credential_tenant(options["credential"], using)
        if options["session"] is not None:
            tenant = visitor_of(options["session"])
        if not key:
            raise CommandError("The key must not be empty.")
        try:
            keys = lookup.stored_keys(key, options["scope"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        found = lookup.find(tenant, keys, using)
        if found is None:
            raise CommandError(missing(tenant, keys[0], using))
        self.stdout.write("\n".join(describe(found, using)))
        if options["show_body"]:
            self.stdout.write(shown_body(found, using))
        if options["release"]:
            self.release(found)

    def release(self, found: lookup.Found) -> None:
        if found.entry.is_final:
            raise CommandError("Not released: the entry is final (only in-progress ones are).")
        if not lookup.release(found):
            raise CommandError(
                "Not released: its lease has not passed, or a running request holds it."
            )
        self.stdout.write(self.style.SUCCESS("Released: the key behaves as new."))


def credential_tenant(credential: str, using: str) -> str:
    """The tenant Ninja's adapter stores for a string principal: a keyed digest of it."""
    if credential == "-":
        credential = sys.stdin.readline().rstrip("\n")
    if not credential:
        raise CommandError("The credential must not be empty.")
    try:
        from idempotency_django.ninja import principal_tenant
    except ImportError as exc:
        raise CommandError(f"--credential needs Django Ninja ({exc}).") from None
    return principal_tenant(credential, using)


def visitor_of(session_key: str) -> str:
    """The key space of an anonymous visitor's form posts, from their session."""
    tenant = session_tenant(session_key)
    if tenant is None:
        raise CommandError(
            "That session holds no form visitor: it is unknown or expired, or no page "
            "with {% idempotency_key_field %} was shown in it."
        )
    return tenant


def missing(tenant: str, key: str, using: str) -> str:
    text = f"No idempotency entry for key {readable(key)!r} of tenant {tenant!r} on {using!r}."
    if lookup.lock_held(tenant, key, using):
        text += " A request holding its lock is in flight (the lock protocol commits the entry "
        text += "with its answer)."
    if not tenant:
        # The usual slip: the default tenant is the anonymous one, a signed-in caller's isn't.
        text += " Keys are per tenant: an authenticated caller's key is under --tenant "
        text += "(a user's primary key by default; the admin's list shows each entry's tenant) "
        text += "or, for a Django Ninja API key, --credential; an anonymous visitor's form "
        text += "post is under --session (their session cookie's value)."
    return text


def describe(found: lookup.Found, using: str) -> list[str]:
    entry = found.entry
    lines = [
        ("key", readable(entry.key)),
        ("tenant", repr(entry.tenant)),
        ("database", repr(using)),
        ("status", entry.status),
        ("protocol", lookup.protocol(found, using)),
        ("response status", status_text(entry)),
        ("created at", entry.created_at.isoformat()),
        ("locked until", f"{entry.locked_until.isoformat()}{lease_text(found)}"),
        ("expires at", f"{entry.expires_at.isoformat()}{expiry_text(found)}"),
        ("headers", headers_text(entry)),
        ("body", size_text(entry)),
    ]
    return [f"{name + ':':<17}{value}" for name, value in lines]


def status_text(entry: Any) -> str:
    if entry.response_status is None:
        return "-"
    reason = entry.response_reason or _phrase(entry.response_status)
    return f"{entry.response_status} {reason}".rstrip()


def _phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return ""


def lease_text(found: lookup.Found) -> str:
    if found.entry.is_final:
        return ""
    return " (lease passed: releasable)" if found.lease_passed else " (lease running)"


def expiry_text(found: lookup.Found) -> str:
    if found.expired:
        return " (expired: treated as absent)"
    return f" (in {str(found.expires_in).split('.')[0]})"


def size_text(entry: Any) -> str:
    summary = lookup.body_summary(entry)
    return summary if summary == "-" else f"{summary} (--show-body prints it)"


def headers_text(entry: Any) -> str:
    headers = entry.response_headers
    if seal.is_sealed_row(headers or []):
        return "sealed (--show-body opens them)"
    return f"{len(headers or [])}"


def shown_body(found: lookup.Found, using: str) -> str:
    """The stored answer opened (never for purge or the outbox: only here and in the admin)."""
    answer, note = lookup.opened(found.entry, using)
    lines = [f"{'note:':<17}{note}"] if note else []
    if answer is None:
        return "\n".join([*lines, "(no stored body)"])
    lines += [f"{name}: {value}" for name, value in answer.headers]
    return "\n".join([*lines, "", body_text(answer.body)])


def body_text(body: bytes) -> str:
    return body.decode("utf-8", "backslashreplace")
