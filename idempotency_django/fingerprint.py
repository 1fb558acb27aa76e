"""Fingerprinting a request: method, path, query and body, JSON compared canonically."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParserError
from django.http.request import RawPostDataException

Fingerprinter = Callable[[HttpRequest], str]


def request_fingerprint(request: HttpRequest) -> str:
    """SHA-256 hex of the canonical request; JSON bodies in any key order or spacing agree."""
    # By name only: the sort is stable, so a repeated parameter keeps its values' order.
    pairs = parse_qsl(request.META.get("QUERY_STRING", ""), keep_blank_values=True)
    query = sorted(pairs, key=lambda pair: pair[0])
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
    media = (request.content_type or "").lower()
    if media == "multipart/form-data" and request.method == "POST":
        # Parsed parts, not bytes: clients pick a new random boundary when they
        # rebuild a retry. Only POST bodies are parsed by Django. A body that fits
        # in memory is read first so the view may still read request.body; a
        # larger one is streamed by the parser, as it would be unprotected.
        if _fits_in_memory(request):
            _read_body(request)
        return _multipart(request)
    try:
        body = request.body
    except RawPostDataException:
        return _multipart(request)  # a middleware (CSRF) parsed the form already
    if _is_json(media):
        return _canonical_json(body)
    return b"raw:" + body


def _fits_in_memory(request: HttpRequest) -> bool:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    return limit is None or length <= limit


def _read_body(request: HttpRequest) -> None:
    with contextlib.suppress(RawPostDataException):
        request.body  # noqa: B018  (cached on the request)


def _multipart(request: HttpRequest) -> bytes:
    try:
        return b"form:" + _canonical_form(request)
    except MultiPartParserError:
        # Malformed: whatever the view makes of it, it is one kind of request.
        return b"form-error:"


def _canonical_json(body: bytes) -> bytes:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return b"raw:" + body
    canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return b"json:" + canonical.encode("utf-8", "surrogatepass")


def _canonical_form(request: HttpRequest) -> bytes:
    fields = sorted((name, value) for name, values in request.POST.lists() for value in values)
    files = sorted(
        (name, upload.name or "", _digest(upload))
        for name, uploads in request.FILES.lists()
        for upload in uploads
    )
    return json.dumps([fields, files], ensure_ascii=False).encode("utf-8", "surrogatepass")


def _digest(upload: UploadedFile[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)  # the view reads it next
    return digest.hexdigest()


def _is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


# -- keyed fingerprints (minimal; the fingerprint work replaces this) --------------


@dataclass(frozen=True)
class Keyed:
    """A request's fingerprint as stored (``current``) and as recognised (``accepted``)."""

    current: str
    accepted: frozenset[str]

    def matches(self, stored: str) -> bool:
        return stored in self.accepted


def keyed(digest: str) -> Keyed:
    """HMAC-SHA256 of ``digest`` under SECRET_KEY; also accepted under SECRET_KEY_FALLBACKS."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    signed = [_sign(secret, digest) for secret in secrets]
    return Keyed(signed[0], frozenset(signed))


def _sign(secret: str, digest: str) -> str:
    key = hashlib.sha256(b"idempotency_django.fingerprint" + secret.encode()).digest()
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def arguments_digest(value: object) -> str:
    """A canonical digest of a function's arguments (JSON, sorted keys)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class RequestSnapshot:
    """What a fingerprint needs, kept before authentication: the request, its body read."""

    request: HttpRequest


def snapshot(request: HttpRequest) -> RequestSnapshot:
    if request.method == "POST" and (request.content_type or "").lower() == "multipart/form-data":
        if _fits_in_memory(request):
            _read_body(request)
    else:
        _read_body(request)
    return RequestSnapshot(request)


def digest(snap: RequestSnapshot) -> str:
    return request_fingerprint(snap.request)
