"""Fingerprinting a request: method, path, query and body, JSON compared canonically."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from urllib.parse import parse_qsl

from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParserError
from django.http.request import RawPostDataException

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
    try:
        body = request.body
    except RawPostDataException:
        # A middleware (CsrfViewMiddleware) parsed multipart/form-data first: its stream is gone.
        return b"form:" + _canonical_form(request)
    media = (request.content_type or "").lower()
    if _is_json(media):
        return _canonical_json(body)
    if media == "multipart/form-data" and request.method == "POST":
        # Clients pick a new random boundary when they rebuild a retry: compare
        # the parsed parts. Django parses POST bodies only; other methods stay raw.
        try:
            return b"form:" + _canonical_form(request)
        except (MultiPartParserError, ValueError):
            return b"raw:" + body
    return b"raw:" + body


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
