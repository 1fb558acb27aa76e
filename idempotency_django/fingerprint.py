"""Fingerprinting a request: method, path, query and body, JSON compared canonically."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from urllib.parse import parse_qsl

from django.http import HttpRequest

Fingerprinter = Callable[[HttpRequest], str]


def request_fingerprint(request: HttpRequest) -> str:
    """SHA-256 hex of the canonical request; JSON bodies in any key order or spacing agree."""
    query = sorted(parse_qsl(request.META.get("QUERY_STRING", ""), keep_blank_values=True))
    parts = [
        (request.method or "").encode(),
        request.path.encode("utf-8", "surrogatepass"),
        json.dumps(query).encode(),
        _canonical_body(request),
    ]
    digest = hashlib.sha256()
    for data in parts:
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def _canonical_body(request: HttpRequest) -> bytes:
    body = request.body
    if _is_json(request.content_type or ""):
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            return b"raw:" + body
        canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return b"json:" + canonical.encode("utf-8", "surrogatepass")
    return b"raw:" + body


def _is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")
