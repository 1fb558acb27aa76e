"""Fingerprinting a request: what makes a retry "the same request", stored only as a keyed hash.

``request_fingerprint`` is the canonical digest: method, path, query, Content-Type and
body, with JSON, form and multipart bodies compared by what they mean rather than their
bytes. It is never stored: ``keyed`` turns it into an HMAC under ``SECRET_KEY`` first, so
a stored fingerprint can't be brute-forced back into the request it came from.

In two steps for the DRF mixin: ``snapshot`` (cheap: it keeps the bytes the request holds,
parses nothing) before authentication, ``digest`` after, so an unauthenticated body is
never turned into a parsed tree.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import hmac
import inspect
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, QueryDict
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.http.request import RawPostDataException
from django.utils.datastructures import MultiValueDict
from django.utils.encoding import force_bytes
from django.utils.http import parse_header_parameters

from idempotency_django._conf import compiled
from idempotency_django._protocol.canonical import Hash, feed, json_digest, value_digest

Fingerprinter = Callable[[HttpRequest], str]
Form: TypeAlias = "tuple[QueryDict, MultiValueDict[str, UploadedFile[bytes]]]"

if TYPE_CHECKING:
    _Upload: TypeAlias = UploadedFile[bytes]
else:
    _Upload = UploadedFile  # generic in django-stubs only

_MULTIPART = "multipart/form-data"
_URLENCODED = "application/x-www-form-urlencoded"
_KEY_SALT = "idempotency_django.fingerprint"
_VERSION = b"idempotency_django.fingerprint/2"
# A form's fields that are not what the person sent: the CSRF token (drawn per page, and
# rotated at login) and the key itself (``forms.FIELD_NAME``). Left out of a form body.
LEFT_OUT_FIELDS = frozenset({"csrfmiddlewaretoken", "idempotency_key"})
_LEFT_OUT_PAIRS = frozenset(name.encode() for name in LEFT_OUT_FIELDS)


@dataclass(frozen=True)
class RequestSnapshot:
    """What the fingerprint reads, taken without parsing anything.

    ``body`` is the bytes the request holds (read now if they fit in
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``); ``form`` instead, for a multipart POST too large
    for that or already consumed by a middleware: it returns ``(request.POST,
    request.FILES)`` when called.
    """

    method: str
    path: str
    query: bytes
    content_type: str
    body: bytes | None = None
    form: Callable[[], Form] | None = None


@dataclass(frozen=True)
class Keyed:
    """A fingerprint as stored: its HMAC under ``SECRET_KEY`` and under each fallback."""

    current: str
    accepted: frozenset[str]

    def matches(self, stored: str) -> bool:
        """Whether ``stored`` was recorded for this request under a key still configured."""
        candidate = stored.encode("utf-8", "surrogatepass")
        return any(hmac.compare_digest(candidate, known.encode()) for known in self.accepted)


def request_fingerprint(request: HttpRequest) -> str:
    """SHA-256 hex of the canonical request; never stored as such (see ``keyed``)."""
    return digest(snapshot(request))


def keyed(digest: str) -> Keyed:
    """HMAC-SHA256 (hex) of ``digest`` under ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS``.

    Store ``current``; compare with ``matches``: a fingerprint stored before a
    rotation still matches while its key is among the fallbacks.
    """
    message = digest.encode("utf-8", "surrogatepass")
    hashes = []
    for prepared in _hmac_keys():
        mac = prepared.copy()
        mac.update(message)
        hashes.append(mac.hexdigest())
    return Keyed(hashes[0], frozenset(hashes))


_HMACS: list[hmac.HMAC] = []


def _hmac_keys() -> list[hmac.HMAC]:
    """One keyed HMAC per secret, ready to copy: ``salted_hmac``'s key derivation done once."""
    if not _HMACS:
        secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
        salt = _KEY_SALT.encode()
        _HMACS.extend(
            hmac.new(hashlib.sha256(salt + force_bytes(secret)).digest(), digestmod=hashlib.sha256)
            for secret in secrets
        )
    return _HMACS


compiled(_HMACS.clear)


def arguments_digest(value: object) -> str:
    """SHA-256 hex of canonical JSON arguments (for calls and tasks); see ``canonical``.

    Object keys in any order agree, tuples are lists, numbers compare exactly; UUID,
    Decimal, datetime and date count by their ``str`` form and type. Anything else,
    or a dict key that is not a ``str``, raises ``TypeError`` naming its type.
    """
    return value_digest(value).hex()


def signature_of(fn: Callable[..., Any]) -> inspect.Signature | None:
    """``fn``'s signature for :func:`bound_arguments` (read once, when decorating)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have none
        return None


def bound_arguments(
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    skip_first: bool = False,
) -> object:
    """The arguments by parameter name, defaults filled in, for :func:`arguments_digest`.

    ``f(5)``, ``f(order_id=5)`` and ``f(5, copies=1)`` are one call: a redelivery
    spelled another way must replay, not be ``KeyReused``. ``skip_first`` leaves
    out a bound task's ``self``. Arguments the signature refuses are kept as
    given: the call then fails with its own ``TypeError``.
    """
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            pass
        else:
            bound.apply_defaults()
            named = dict(bound.arguments)
            if skip_first:
                named.pop(next(iter(signature.parameters)))
            return named
    return {"args": list(args), "kwargs": kwargs}


def snapshot(request: HttpRequest) -> RequestSnapshot:
    """The parts of ``request`` the fingerprint reads; cheap enough before authentication."""
    body, form = _held_body(request)
    return RequestSnapshot(
        method=request.method or "",
        path=request.path,
        query=_raw_query(request),
        content_type=request.META.get("CONTENT_TYPE", ""),
        body=body,
        form=form,
    )


def digest(snapshot: RequestSnapshot) -> str:
    """The canonical digest of a snapshot: ``request_fingerprint`` in a second step."""
    result = hashlib.sha256(_VERSION)
    feed(result, snapshot.method.encode("utf-8", "surrogatepass"))
    feed(result, snapshot.path.encode("utf-8", "surrogatepass"))
    feed(result, _pairs_digest(snapshot.query))
    feed(result, _canonical_content_type(snapshot.content_type))
    feed(result, _body_digest(snapshot))
    return result.hexdigest()


# --- taking the snapshot -------------------------------------------------------------------------


def _raw_query(request: HttpRequest) -> bytes:
    text: str = request.META.get("QUERY_STRING", "")
    if isinstance(request, ASGIRequest):
        return text.encode("utf-8", "surrogatepass")  # Django decoded the scope's bytes as UTF-8
    # PEP 3333: QUERY_STRING is the raw bytes decoded as latin-1; undo that exactly.
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:  # not from a WSGI server: no byte was lost to recover
        return text.encode("utf-8", "surrogatepass")


def _held_body(request: HttpRequest) -> tuple[bytes | None, Callable[[], Form] | None]:
    read = getattr(request, "_read_started", False)
    if hasattr(request, "_body") or (not read and _fits_in_memory(request)):
        return request.body, None
    consumed = read and hasattr(request, "_post")  # DRF or CsrfViewMiddleware parsed it
    if request.content_type == _MULTIPART and (consumed or (not read and request.method == "POST")):
        # Too large to hold: Django streams it to temporary files when it is parsed.
        return None, functools.partial(_parsed_form, request)
    # Raises as the view itself would: RequestDataTooBig (a 400), or RawPostDataException
    # when something read the stream and kept nothing, leaving nothing to compare.
    return request.body, None


def _fits_in_memory(request: HttpRequest) -> bool:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    return limit is None or length <= limit


def _parsed_form(request: HttpRequest) -> Form:
    if getattr(request, "_read_started", False) and not hasattr(request, "_post"):
        # request.POST would silently be empty, and every such body "the same".
        raise RawPostDataException("The request body was read before it was fingerprinted.")
    return request.POST, request.FILES


# --- digesting it --------------------------------------------------------------------------------


def _body_digest(snapshot: RequestSnapshot) -> bytes:
    if snapshot.form is not None:
        return b"form:" + _form_digest(*snapshot.form())
    media = _media_type(snapshot.content_type)
    body = snapshot.body or b""
    if media == _MULTIPART:
        return _multipart_digest(body, snapshot.content_type)
    if media == _URLENCODED:
        return b"pairs:" + _pairs_digest(body, _LEFT_OUT_PAIRS)
    if media == "application/json" or media.endswith("+json"):
        canonical = json_digest(body)
        if canonical is not None:
            return b"json:" + canonical
    return b"raw:" + hashlib.sha256(body).digest()


def _pairs_digest(raw: bytes, left_out: frozenset[bytes] = frozenset()) -> bytes:
    """Query strings and form bodies: fields sorted by name, each name's values in order.

    ``request.GET``/``POST`` are mappings of name to list: the order *between* names is
    invisible to a view (and clients reorder them), the order *within* one name is what
    ``getlist()`` returns (``order=approve&order=pay`` is not ``order=pay&order=approve``).
    The sort is stable and by name only, so it keeps the latter. Names and values are
    compared as percent-decoded bytes, before any charset decoding can merge two.
    A form body leaves out ``left_out`` (``LEFT_OUT_FIELDS``).
    """
    result = hashlib.sha256()
    if raw.count(b"&") >= _max_fields():
        # More fields than Django will parse: it answers 400, so bytes are exact enough,
        # and a list of a million tuples would cost far more than the body.
        result.update(b"raw:" + hashlib.sha256(raw).digest())
        return result.digest()
    for name, value in sorted(_pairs(raw), key=lambda pair: pair[0]):
        if name in left_out:
            continue
        feed(result, name)
        feed(result, value)
    return result.digest()


def _max_fields() -> float:
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    return float("inf") if limit is None else limit


def _pairs(raw: bytes) -> Iterator[tuple[bytes, bytes]]:
    # As Django's QueryDict (and parse_qsl) split: "&" only, blank values kept, "a" is "a=".
    for field in raw.split(b"&"):
        if field:
            name, _, value = field.partition(b"=")
            yield _unquote(name), _unquote(value)


def _unquote(raw: bytes) -> bytes:
    return unquote_to_bytes(raw.replace(b"+", b" "))


# A client sends the same few content types: each is parsed once (pure, small, bounded).
@functools.lru_cache(maxsize=256)
def _canonical_content_type(raw: str) -> bytes:
    """Media type and parameters, lower-cased; ``boundary`` left out.

    The boundary only frames the parts and clients draw a new one for each attempt. Every
    other parameter can change what the body means (``charset`` how it decodes, so it is
    compared by codec: ``UTF8`` is ``utf-8``); an absent charset is not ``utf-8``.
    """
    media, params = _parse_content_type(raw)
    kept = sorted((name, _parameter(name, value)) for name, value in params.items())
    kept = [(name, value) for name, value in kept if name != "boundary"]
    return json.dumps([media, kept], ensure_ascii=False).encode("utf-8", "surrogatepass")


@functools.lru_cache(maxsize=256)
def _media_type(raw: str) -> str:
    return _parse_content_type(raw)[0]


def _parse_content_type(raw: str) -> tuple[str, dict[str, str]]:
    try:
        media, params = parse_header_parameters(raw)
    except ValueError:  # an RFC 2231 parameter in an unknown charset: keep it whole
        return raw.strip().lower(), {}
    return media, {name.lower(): value for name, value in params.items()}


def _parameter(name: str, value: str) -> str:
    if name != "charset":
        return value
    try:
        return codecs.lookup(value).name
    except LookupError:
        return value.lower()


def _multipart_digest(body: bytes, content_type: str) -> bytes:
    meta = {"CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body))}
    try:
        parser = MultiPartParser(
            meta, io.BytesIO(body), [_HashingUploads()], _charset(content_type)
        )
        fields, files = parser.parse()
    except (MultiPartParserError, SuspiciousOperation):
        # Malformed, or beyond Django's limits (the view would answer 400): as bytes.
        return b"raw:" + hashlib.sha256(body).digest()
    return b"form:" + _form_digest(fields, files)


def _charset(content_type: str) -> str:
    # As HttpRequest.encoding: the charset parameter if Python knows it, else the default.
    charset = _parse_content_type(content_type)[1].get("charset", "")
    try:
        return codecs.lookup(charset).name
    except LookupError:
        return settings.DEFAULT_CHARSET


def _form_digest(fields: QueryDict, files: MultiValueDict[str, Any]) -> bytes:
    """Parsed form fields and uploads, sorted by name only (see ``_pairs_digest``)."""
    result = hashlib.sha256()
    _feed_lists(
        result,
        fields,
        lambda value: feed(result, value.encode("utf-8", "surrogatepass")),
        LEFT_OUT_FIELDS,
    )
    _feed_lists(result, files, lambda upload: _feed_upload(result, upload))
    return result.digest()


def _feed_lists(
    result: Hash,
    values: MultiValueDict[str, Any],
    each: Callable[[Any], None],
    left_out: frozenset[str] = frozenset(),
) -> None:
    lists = sorted(
        ((name, items) for name, items in values.lists() if name not in left_out),
        key=lambda item: item[0],
    )
    result.update(len(lists).to_bytes(8, "big"))
    for name, items in lists:
        feed(result, name.encode("utf-8", "surrogatepass"))
        result.update(len(items).to_bytes(8, "big"))
        for item in items:
            each(item)


def upload_digest(upload: UploadedFile[bytes]) -> str:
    """SHA-256 hex of an upload as a form's file counts: its name, content type, charset
    and content, read in chunks (then rewound for the view). For an upload that is an
    argument (a GraphQL ``Upload``), not a form field."""
    result = hashlib.sha256()
    _feed_upload(result, upload)
    return result.hexdigest()


def _feed_upload(result: Hash, upload: UploadedFile[bytes]) -> None:
    for text in (upload.name or "", upload.content_type or "", upload.charset or ""):
        feed(result, text.encode("utf-8", "surrogatepass"))
    result.update(_content_digest(upload))


def _content_digest(upload: UploadedFile[bytes]) -> bytes:
    if isinstance(upload, _HashedUpload):
        return upload.sha256
    content = hashlib.sha256()
    for chunk in upload.chunks():
        content.update(chunk)
    upload.seek(0)  # the view reads it next
    return content.digest()


class _HashedUpload(_Upload):
    """An upload reduced to its digest: parsed for the fingerprint only, never read."""

    def __init__(self, sha256: bytes, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sha256 = sha256


class _HashingUploads(FileUploadHandler):
    """Hashes each uploaded file as it streams past, so a body is never held twice."""

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        self._content = hashlib.sha256()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        self._content.update(raw_data)

    def file_complete(self, file_size: int) -> _HashedUpload:
        return _HashedUpload(
            self._content.digest(),
            name=self.file_name,
            content_type=self.content_type,
            size=file_size,
            charset=self.charset,
        )
