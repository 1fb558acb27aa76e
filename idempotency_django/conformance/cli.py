"""The command line: parse, run every scenario over HTTP, print the table, exit 0 or 1."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from idempotency_django.conformance.report import table, write_json
from idempotency_django.conformance.scenarios import DEFAULT_BODY, Options, failures, run_scenarios


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


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="python -m idempotency_django.conformance",
        description="Judge a live endpoint protected by Idempotency-Key against the contract "
        "of docs/http.rst. Exit status 0 when every scenario that ran passed, 1 otherwise.",
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
    cli.add_argument("--json", type=Path, metavar="PATH", help="also write the results here")
    return cli


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from idempotency_django.conformance.http import HttpTransport

    transport = HttpTransport(args.url, dict(args.header), dict(args.other_caller_header))
    options = Options(body=args.body, id_field=args.id_field, progress=_progress)
    try:
        results = run_scenarios(transport, options)
    finally:
        transport.close()
    print(table(results))
    if args.json is not None:
        write_json(args.json, args.url, results)
    return 1 if any(True for _ in failures(results)) else 0


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
