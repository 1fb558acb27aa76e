"""The peers' FastAPI app: POST /charges/ records each run of the view in PostgreSQL.

``PEER`` picks the package, wired as its README says; ``served`` (uvicorn's app) wraps the
whole in ``wire``, which records every POST /charges/ and its answer, whoever answered it.
"""

import json
import os
import time

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

PEER = os.environ["PEER"]
DSN = os.environ["PEER_DSN"]
KEY_HEADER = os.environ.get("PEER_KEY_HEADER", "Idempotency-Key").lower()


async def insert(sql, *params):
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        cursor = await conn.execute(sql, params)
        return await cursor.fetchone() if cursor.description else None


def caller(request):
    return request.headers.get("authorization", "")


if PEER == "asgi-idempotency-header":
    from fastapi.middleware import Middleware
    from idempotency_header_middleware import IdempotencyHeaderMiddleware
    from idempotency_header_middleware.backends import RedisBackend
    from redis.asyncio import from_url

    backend = RedisBackend(redis=from_url(os.environ["PEER_REDIS"]))
    app = FastAPI(middleware=[Middleware(IdempotencyHeaderMiddleware, backend=backend)])
elif PEER == "fastapi-idempotency":
    from fastapi_idempotency import IdempotencyMiddleware

    app = FastAPI()
    # Its README: for a logged-in API, scope by the caller, not the default client IP.
    app.add_middleware(IdempotencyMiddleware, scope=caller)
elif PEER == "idemptx":
    import redis
    from idemptx import idempotent
    from idemptx.backend import RedisBackend

    app = FastAPI()
    # Its Quick Start: the decorator under the route, the sync Redis backend, and no handler
    # for its exceptions (a missing key, a conflict): the README names none, so they are 500s.
    idempotency = idempotent(
        storage_backend=RedisBackend(redis.Redis.from_url(os.environ["PEER_REDIS"]))
    )
else:
    raise SystemExit(f"unknown PEER {PEER!r}")


def protected(view):
    return idempotency(view) if PEER == "idemptx" else view


@app.post("/charges/")
@protected
async def create(request: Request):
    try:
        data = json.loads(await request.body())
    except ValueError:
        data = None
    amount = data.get("amount") if isinstance(data, dict) else None
    row = (request.headers.get(KEY_HEADER), caller(request), time.time())
    if not isinstance(amount, int):
        await insert("INSERT INTO charges (key, caller, at, status) VALUES (%s, %s, %s, 400)", *row)
        return JSONResponse({"error": "send an amount"}, status_code=400)
    sql = "INSERT INTO charges (key, caller, at, status, amount) VALUES (%s, %s, %s, 201, %s)"
    (ident,) = await insert(sql + " RETURNING id", *row, amount)
    return JSONResponse({"id": ident, "amount": amount}, status_code=201)


@app.get("/count/")
async def count():
    (n,) = await insert("SELECT count(*) FROM charges WHERE status = 201")
    return {"count": n}


def wire(inner):
    async def app(scope, receive, send):
        if scope["type"] != "http" or (scope["method"], scope["path"]) != ("POST", "/charges/"):
            return await inner(scope, receive, send)
        arrived, status, body = time.time(), 0, b""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}

        async def sending(message):
            nonlocal status, body
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                body += message.get("body", b"")
            await send(message)

        try:
            await inner(scope, receive, sending)
        except Exception:
            status = status or 500  # uvicorn answers an unhandled exception with 500
            raise
        finally:
            sql = (
                "INSERT INTO calls (key, caller, status, answer_id, at) VALUES (%s, %s, %s, %s, %s)"
            )
            who = headers.get("authorization", "")
            await insert(sql, headers.get(KEY_HEADER), who, status, answer_id(body), arrived)

    return app


def answer_id(body):
    try:
        data = json.loads(body)
    except ValueError:
        return None
    ident = data.get("id") if isinstance(data, dict) else None
    return ident if isinstance(ident, int) else None


served = wire(app)
