"""httpx transports that give unsafe requests one Idempotency-Key across their retries."""

from __future__ import annotations

from idempotency_django._adapters.extras import raise_missing_extra

try:
    import httpx
except ModuleNotFoundError as error:  # pragma: no cover  (tested in a subprocess)
    raise_missing_extra(error, __name__, "httpx")

from idempotency_django.client.policy import Attempts, RetryPolicy, key_for, needs_body

# No answer came: the request may or may not have reached the server and committed, which
# is exactly the case the key makes safe to send again.
RETRYABLE_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def _prepare(request: httpx.Request, policy: RetryPolicy) -> Attempts:
    key = key_for(request.headers.get(policy.header))
    request.headers[policy.header] = key
    return Attempts(policy, key)


def _content_type(response: httpx.Response) -> str | None:
    value: str | None = response.headers.get("Content-Type")
    return value


def _needs_body(response: httpx.Response) -> bool:
    return needs_body(response.status_code, _content_type(response))


def _final(response: httpx.Response, attempts: Attempts) -> httpx.Response:
    response.extensions = {
        **response.extensions,
        "idempotency_key": attempts.key,
        "idempotency_attempts": attempts.count,
    }
    return response


class IdempotentTransport(httpx.BaseTransport):
    """Wraps ``transport`` (default: ``httpx.HTTPTransport()``).

    ``httpx.Client(transport=IdempotentTransport())``: a POST, PUT, PATCH or DELETE
    without an ``Idempotency-Key`` gets a fresh UUIDv7 one, sent unchanged on every
    retry; a key the caller set is kept. The key is on ``response.request.headers``
    and ``response.extensions["idempotency_key"]``. Other methods pass through once.
    """

    def __init__(
        self, transport: httpx.BaseTransport | None = None, *, policy: RetryPolicy | None = None
    ) -> None:
        self.transport = transport or httpx.HTTPTransport()
        self.policy = policy or RetryPolicy()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self.policy.applies(request.method):
            return self.transport.handle_request(request)
        attempts = _prepare(request, self.policy)
        request.read()  # a streamed body, buffered once so each attempt sends it whole
        while True:
            attempts.begin(request.headers)
            try:
                response = self.transport.handle_request(request)
            except RETRYABLE_ERRORS as error:
                self.policy.sleep(attempts.after_error(error))
                continue
            body = response.read() if _needs_body(response) else None
            if self.policy.is_final(response.status_code, _content_type(response), body):
                return _final(response, attempts)
            response.close()
            self.policy.sleep(
                attempts.after_status(response.status_code, response.headers.get("Retry-After"))
            )

    def close(self) -> None:
        self.transport.close()


class AsyncIdempotentTransport(httpx.AsyncBaseTransport):
    """The same as :class:`IdempotentTransport` for ``httpx.AsyncClient``."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.transport = transport or httpx.AsyncHTTPTransport()
        self.policy = policy or RetryPolicy()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self.policy.applies(request.method):
            return await self.transport.handle_async_request(request)
        attempts = _prepare(request, self.policy)
        await request.aread()
        while True:
            attempts.begin(request.headers)
            try:
                response = await self.transport.handle_async_request(request)
            except RETRYABLE_ERRORS as error:
                await self.policy.async_sleep(attempts.after_error(error))
                continue
            body = await response.aread() if _needs_body(response) else None
            if self.policy.is_final(response.status_code, _content_type(response), body):
                return _final(response, attempts)
            await response.aclose()
            await self.policy.async_sleep(
                attempts.after_status(response.status_code, response.headers.get("Retry-After"))
            )

    async def aclose(self) -> None:
        await self.transport.aclose()
