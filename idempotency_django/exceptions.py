"""The client errors a protected view answers with; each maps to one RFC 9457 problem."""

from __future__ import annotations

from typing import ClassVar

# Each problem's ``type`` is an anchor of the HTTP page of the docs (tests/test_docs.py checks it).
PROBLEM_BASE = "https://idempotency-django.readthedocs.io/en/latest/http.html#"


class IdempotencyError(Exception):
    """A client error: carries the HTTP status and a stable problem code."""

    status: ClassVar[int] = 400
    code: ClassVar[str] = "error"
    title: ClassVar[str] = "Idempotency error"
    default_detail: ClassVar[str] = ""

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or self.default_detail
        super().__init__(self.detail)

    @property
    def type_uri(self) -> str:
        return PROBLEM_BASE + self.code

    def headers(self) -> dict[str, str]:
        return {}


class KeyMissing(IdempotencyError):
    status, code = 400, "key-missing"
    title = "Idempotency key missing"
    default_detail = "This endpoint requires an idempotency key header."


class KeyMalformed(IdempotencyError):
    status, code = 400, "key-malformed"
    title = "Idempotency key malformed"


class KeyReused(IdempotencyError):
    status, code = 422, "key-reused"
    title = "Idempotency key reused"
    default_detail = "This idempotency key was already used with a different request."


class RequestInProgress(IdempotencyError):
    status, code = 409, "in-progress"
    title = "Request in progress"
    default_detail = "A request with this idempotency key is still being processed; retry later."

    def __init__(self, detail: str | None = None, retry_after: int = 1) -> None:
        super().__init__(detail)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class StoreUnavailable(IdempotencyError):
    status, code = 503, "unavailable"
    title = "Idempotency store unavailable"
    default_detail = "The idempotency store cannot be reached; nothing was executed. Retry later."

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "5"}


class NotAuthenticated(IdempotencyError):
    status, code = 401, "not-authenticated"
    title = "Authentication required"
    default_detail = "Asking about a key needs an authenticated caller: keys belong to one."

    def __init__(self, detail: str | None = None, challenge: str | None = None) -> None:
        super().__init__(detail)
        self.challenge = challenge

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": self.challenge} if self.challenge else {}


class KeyUnknown(IdempotencyError):
    status, code = 404, "key-unknown"
    title = "Idempotency key unknown"
    default_detail = (
        "No request with this idempotency key is known for you: never received, "
        "rolled back, or past its retention."
    )


class PreconditionFailed(IdempotencyError):
    status, code = 412, "precondition-failed"
    title = "Precondition failed"
    default_detail = "The resource changed since you read it (If-Match); read it again."


class PreconditionRequired(IdempotencyError):
    status, code = 428, "precondition-required"
    title = "Precondition required"
    default_detail = "This update needs an If-Match header with the resource's current ETag."


class AnswerUnreadable(IdempotencyError):
    """The key's stored answer is there but does not open: never replayed as garbage.

    Tampered with, copied from another key's row, or sealed under a key no longer in
    ``IDEMPOTENCY_ENCRYPTION_KEYS``. Nothing runs (the key was used); the entry
    answers this until it expires, or an operator deletes it.
    """

    status, code = 500, "answer-unreadable"
    title = "Stored answer unreadable"
    default_detail = (
        "The answer stored for this idempotency key cannot be read on this server; "
        "nothing was executed. Contact the service's operators."
    )


class AnswerTooLarge(IdempotencyError):
    """The view's answer is over ``IDEMPOTENCY_MAX_STORED_BYTES``: not stored, writes rolled back.

    A 5xx, because the request was fine and the server could not keep its answer;
    500 rather than WebDAV's 507, whose meaning (the *request's* representation
    could not be stored) general HTTP clients don't know. Nothing committed, so
    the key is free and a retry is safe (and meets the same bound).
    """

    status, code = 500, "answer-too-large"
    title = "Answer too large to store"

    @classmethod
    def of(cls, size: int, limit: int) -> AnswerTooLarge:
        return cls(
            f"The answer ({size} bytes) is over IDEMPOTENCY_MAX_STORED_BYTES ({limit} bytes), "
            "so it could not be stored for replays; nothing was committed."
        )


ALL_ERRORS: tuple[type[IdempotencyError], ...] = (
    KeyMissing,
    KeyMalformed,
    KeyReused,
    RequestInProgress,
    StoreUnavailable,
    NotAuthenticated,
    KeyUnknown,
    PreconditionFailed,
    PreconditionRequired,
    AnswerUnreadable,
    AnswerTooLarge,
)


class NestedRefusal(RuntimeError):
    """An idempotent call inside a protected view (or call, or task) was refused: it failed.

    The refusal is about the inner call's key, not the client's: the request
    fails as any view exception does (rolled back, key freed, nothing stored),
    instead of answering the client 409/422 about a key it never sent. Catch
    the inner ``IdempotencyError`` in the view to answer otherwise.
    """

    def __init__(self, error: IdempotencyError) -> None:
        super().__init__(f"An idempotent call nested inside was refused ({error.code}): {error}")
        self.error = error

    def __reduce__(self) -> tuple[type[NestedRefusal], tuple[IdempotencyError]]:
        # Picklable as itself: a task's result backend stores its failures.
        return (type(self), (self.error,))


class IdempotencyDeprecationWarning(DeprecationWarning):
    """A public name or setting used here is deprecated and will be removed (docs/deprecation.rst).

    A subclass so that a project can turn exactly these into errors in its test suite
    (``warnings.simplefilter("error", IdempotencyDeprecationWarning)``, or pytest's
    ``filterwarnings``).
    """


__all__ = [
    "PROBLEM_BASE",
    "AnswerTooLarge",
    "AnswerUnreadable",
    "IdempotencyDeprecationWarning",
    "IdempotencyError",
    "KeyMalformed",
    "KeyMissing",
    "KeyReused",
    "KeyUnknown",
    "NestedRefusal",
    "NotAuthenticated",
    "PreconditionFailed",
    "PreconditionRequired",
    "RequestInProgress",
    "StoreUnavailable",
]
