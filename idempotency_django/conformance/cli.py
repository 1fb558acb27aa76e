"""The command line: parse, run every scenario over HTTP, print the table, exit 0, 1 or 2.

``idempotency-conformance`` (the console script) and ``python -m
idempotency_django.conformance`` both call :func:`main`. Nothing here needs Django's
settings, and ``--help`` imports neither Django nor httpx: the command starts at once.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from idempotency_django.conformance.report import table, write_json
from idempotency_django.conformance.scenarios import (
    DEFAULT_BODY,
    KEY_FORMATS,
    KEY_HEADER,
    PROFILES,
    STRICT,
    Options,
    Result,
    failures,
    run_scenarios,
)

USAGE_ERROR = 2
PROG = "idempotency-conformance"
INSTALL = 'pip install "idempotency-django[conformance]"'


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def body(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError("--body must be a JSON object")
    return data


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog=prog,
        description="Judge a live endpoint protected by Idempotency-Key, in any language, "
        "against the contract of idempotency-django (or the IETF draft's, --profile draft). "
        "Exit status 0 when every scenario that ran passed, 1 when any failed or timed out, "
        "2 on a usage error.",
    )
    cli.add_argument("url", metavar="URL", help="an endpoint that creates something on POST")
    cli.add_argument(
        "--header",
        action="append",
        type=header,
        default=[],
        help="'Name: value' sent on every request (the caller's credentials); repeatable",
    )
    cli.add_argument(
        "--other-caller-header",
        action="append",
        type=header,
        default=[],
        help="'Name: value' of a second caller (other credentials); repeatable",
    )
    cli.add_argument(
        "--body",
        type=body,
        default=dict(DEFAULT_BODY),
        help=f"the JSON body to send (default: {json.dumps(DEFAULT_BODY)})",
    )
    cli.add_argument(
        "--id-field", default="id", help="the answer's JSON field naming what was created"
    )
    cli.add_argument(
        "--key-header", default=KEY_HEADER, metavar="NAME", help="the key's header name"
    )
    cli.add_argument(
        "--key-format",
        choices=KEY_FORMATS,
        default="token",
        help="token (default): conformance-<uuid4>; uuid: a plain uuid4",
    )
    cli.add_argument(
        "--profile",
        choices=PROFILES,
        default=STRICT,
        help="strict (default): this library's contract; draft: the IETF draft's requirements, "
        "its recommendations reported as warnings",
    )
    cli.add_argument(
        "--count-url",
        metavar="URL",
        help='a GET answering the number of effects so far (an integer or {"count": n}), '
        "read before and after each scenario",
    )
    cli.add_argument(
        "--timeout",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long one request may take before its scenario is a timeout (default: 30)",
    )
    cli.add_argument(
        "--marked-retry",
        action="store_true",
        default=None,
        help="also send this library's marked retry (Idempotency-Retry) under --profile draft",
    )
    cli.add_argument(
        "--hooks",
        action="store_true",
        default=None,
        help="also send this library's test hooks (Idempotency-Test-*) under --profile draft",
    )
    cli.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    return cli


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = parser(prog).parse_args(argv)
    try:
        from idempotency_django.conformance.http import HttpTransport
    except ImportError as error:  # httpx is an extra: say which
        print(f"{prog} needs httpx ({error}): {INSTALL}", file=sys.stderr)
        return USAGE_ERROR
    transport = HttpTransport(
        args.url, dict(args.header), dict(args.other_caller_header), timeout=args.timeout
    )
    try:
        results = _run(transport, args)
    finally:
        transport.close()
    if results is None:
        return USAGE_ERROR
    print(table(results))
    if args.json is not None:
        write_json(args.json, args.url, results, args.profile)
    return 1 if any(True for _ in failures(results)) else 0


def _run(transport: Any, args: argparse.Namespace) -> list[Result] | None:
    """Every scenario's result; None when ``--count-url`` does not answer a number at start."""
    options = Options(
        body=args.body,
        id_field=args.id_field,
        header=args.key_header,
        key_format=args.key_format,
        profile=args.profile,
        progress=_progress,
        marked_retry=args.marked_retry,
        hooks=args.hooks,
    )
    if args.count_url:
        try:
            transport.count(args.count_url)
        except ValueError as error:
            print(error, file=sys.stderr)
            return None
        options.executions = functools.partial(transport.count, args.count_url)
    return run_scenarios(transport, options)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
