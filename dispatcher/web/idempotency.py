"""`idempotency-key` on POST (SPEC "The Svix-compatible API"): a repeat of
a key within 24 h answers what the first request answered and does nothing
again, in any process, because the answer is kept in PostgreSQL.

Keys are per caller (the admin, or one application), so one tenant's key
never reads another's answer. A request that ended in an exception or a
5xx keeps nothing: its retry runs again, as the SDKs expect of a retry.
The same key with a different request is refused (409), as is a repeat
that arrives while the first is still running.

A kept answer is at most MAX_ANSWER bytes, so a day of keys cannot hold
unbounded copies of what was sent: a larger one is kept with its `payload`
as `{}` (what Svix answers without content) when that fits, else only as a
409 saying the request was done and its answer not kept. Either way the
repeat does nothing again.
"""

from __future__ import annotations

import hashlib

import orjson
from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput, Conflict
from dispatcher.db import svix as store
from dispatcher.web import security
from dispatcher.web.keys import POOL, read_raw
from dispatcher.web.routes import Handler

HEADER = "idempotency-key"
MAX_KEY = 256
ADMIN_SCOPE = "admin"  # application ids cannot contain a space: never "admin " etc.
MAX_ANSWER = 64 * 1024


def _request_hash(request: web.Request, body: bytes) -> bytes:
    h = hashlib.sha256()
    for part in (request.method, request.path_qs):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    h.update(body)
    return h.digest()


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.headers.get(HEADER)
    if request.method != "POST" or key is None or request.app[security.RULES].is_open(request.path):
        return await handler(request)
    if not 0 < len(key) <= MAX_KEY or not key.isprintable():
        raise BadInput(f"{HEADER} must be 1-{MAX_KEY} printable characters")
    scope = f"app:{request[security.APP]}" if security.APP in request else ADMIN_SCOPE
    digest = _request_hash(request, await read_raw(request))
    async with db.acquire(request.app[POOL]) as conn:
        if not await store.claim_key(conn, scope, key, digest):
            return await _replay(conn, scope, key, digest)
    try:
        response = await handler(request)
    except BaseException:
        async with db.acquire(request.app[POOL]) as conn:
            await store.release_key(conn, scope, key)
        raise
    async with db.acquire(request.app[POOL]) as conn:
        body = response.body if isinstance(response, web.Response) else None
        if response.status >= 500 or not isinstance(body, bytes | None):
            await store.release_key(conn, scope, key)
        else:
            await store.finish_key(conn, scope, key, *_kept(request, response.status, body or b""))
    return response


def _kept(request: web.Request, status: int, body: bytes) -> tuple[int, bytes]:
    """What a repeat will answer: the first answer, or one within MAX_ANSWER."""
    if len(body) <= MAX_ANSWER:
        return status, body
    if b'"payload"' in body:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and "payload" in doc:
            smaller = orjson.dumps({**doc, "payload": {}})
            if len(smaller) <= MAX_ANSWER:
                return status, smaller
    note = security.error_response(
        request, 409, f"the request with this {HEADER} was done (HTTP {status}); its answer "
        f"was over {MAX_ANSWER // 1024} KiB and is not kept",
    ).body  # fmt: skip
    assert isinstance(note, bytes)
    return 409, note


async def _replay(conn: db.Conn, scope: str, key: str, digest: bytes) -> web.Response:
    found = await store.stored_answer(conn, scope, key)
    if found is not None and found["request_hash"] != digest:
        raise Conflict(f"this {HEADER} was used for a different request")
    if found is None or found["status"] is None:
        raise Conflict(f"a request with this {HEADER} is still running: retry later")
    body: bytes = found["body"]
    return web.Response(
        status=found["status"],
        body=body or None,
        content_type="application/json" if body else None,
        headers={"Idempotent-Replayed": "true"},
    )
