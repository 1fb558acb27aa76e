"""A requests adapter that gives unsafe requests one Idempotency-Key across their retries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import requests
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "requests")
from requests.adapters import HTTPAdapter

from idempotency_django.client.policy import Attempts, RetryPolicy, key_for, needs_body

# No answer came (refused, reset, timed out). An SSLError is a configuration problem: no retry.
RETRYABLE_ERRORS = (requests.ConnectionError, requests.Timeout)


class IdempotentAdapter(HTTPAdapter):
    """``session.mount("https://", IdempotentAdapter())``.

    A POST, PUT, PATCH or DELETE without an ``Idempotency-Key`` gets a fresh UUIDv7
    one, sent unchanged on every retry; a key the caller set is kept. The key is on
    ``response.request.headers``. Other methods, and a body that can be read only
    once (a file, a generator), get one attempt. ``HTTPAdapter``'s own ``max_retries``
    stays 0: retrying is this adapter's job.
    """

    def __init__(self, *, policy: RetryPolicy | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.policy = policy or RetryPolicy()

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        if not self.policy.applies(request.method or "GET"):
            return super().send(request, **kwargs)
        given = request.headers.get(self.policy.header)
        attempts = Attempts(
            self.policy, key_for(given.decode() if isinstance(given, bytes) else given)
        )
        request.headers[self.policy.header] = attempts.key
        once = not _resendable(request.body)
        while True:
            attempts.begin(request.headers)
            try:
                response = super().send(request, **kwargs)
            except RETRYABLE_ERRORS as error:
                if once:
                    raise
                self.policy.sleep(attempts.after_error(error))
                continue
            content_type = response.headers.get("Content-Type")
            # .content reads the body once and keeps it for the caller.
            body = response.content if needs_body(response.status_code, content_type) else None
            if once or self.policy.is_final(response.status_code, content_type, body):
                return response
            response.close()
            self.policy.sleep(
                attempts.after_status(response.status_code, response.headers.get("Retry-After"))
            )


def _resendable(body: object) -> bool:
    return body is None or isinstance(body, str | bytes | Mapping)
