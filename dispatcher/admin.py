"""The admin HTTP API (aiohttp.web): health probes, metrics, JSON under /v1/, dashboard.

An entry point: it wires the store, reports and metrics together. Everything
but /healthz and /readyz requires `Authorization: Bearer $DISPATCHER_ADMIN_TOKEN`.
"""

from __future__ import annotations

import hmac
import importlib.resources
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
from aiohttp import web

from . import reports, service, store
from .errors import BadInput, DispatcherError, UnknownEndpoint
from .metrics import CONTENT_TYPE, Metrics
from .openapi import OPENAPI
from .settings import Settings

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
TOKEN: web.AppKey[str] = web.AppKey("token", str)
REFRESHED: web.AppKey[list[float]] = web.AppKey("percentiles_refreshed", list)
PERCENTILE_REFRESH_S = 5.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(doc: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(doc, default=_default), status=status, content_type="application/json"
    )


def _default(value: Any) -> Any:
    from decimal import Decimal

    if isinstance(value, Decimal):
        return float(value)
    raise TypeError


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path not in OPEN_PATHS:
        token = request.app[TOKEN]
        offered = request.headers.get("Authorization", "")
        query = request.query.get("token", "")
        if not (
            hmac.compare_digest(offered.encode(), f"Bearer {token}".encode())
            or (query and hmac.compare_digest(query.encode(), token.encode()))
        ):
            return _error(401, "missing or wrong bearer token")
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except UnknownEndpoint as exc:
        return _error(404, str(exc))
    except BadInput as exc:
        return _error(400, str(exc))
    except DispatcherError as exc:
        return _error(503, str(exc))
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return _error(503, "database unavailable")


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadInput("request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadInput("request body must be a JSON object")
    return doc


def _int(value: str, name: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise BadInput(f"{name} must be an integer") from None
    if not 0 < n < 2**63:
        raise BadInput(f"{name} is out of range")
    return n


def _refresh_due(request: web.Request) -> bool:
    """Recompute percentiles at most every PERCENTILE_REFRESH_S per server.

    A dashboard polls three routes every 2 s and Prometheus scrapes /metrics;
    each recomputing the window (0.44 s of database time per million samples)
    would put the cost on every read. `serve` runs no maintenance task, so
    this is also what keeps its figures fresh.
    """
    clock = request.app[REFRESHED]
    now = time.monotonic()
    if now - clock[0] < PERCENTILE_REFRESH_S:
        return False
    clock[0] = now
    return True


# ---------------------------------------------------------------- probes


async def healthz(_: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        async with request.app[POOL].acquire() as conn:
            current = await store.migrations_current(conn)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return _json({"ready": False, "reason": "database unreachable"}, 503)
    if not current:
        return _json({"ready": False, "reason": "migrations pending"}, 503)
    return _json({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    async with request.app[POOL].acquire() as conn:
        view = await store.metrics_view(conn)
        alerts = await reports.alerts(conn, request.app[SETTINGS], refresh=_refresh_due(request))
    m.set_database_view(
        {k: view[k] for k in ("pending", "failed", "in_flight", "dead_letter")},
        view["oldest_pending_s"],
        {k: view[k] for k in ("closed", "open", "half_open")},
        alerts,
    )
    return web.Response(body=m.render(), headers={"Content-Type": CONTENT_TYPE})


async def dashboard(_: web.Request) -> web.Response:
    page = importlib.resources.files("dispatcher").joinpath("static/dashboard.html").read_bytes()
    return web.Response(body=page, content_type="text/html")


async def openapi(_: web.Request) -> web.Response:
    return _json(OPENAPI)


# ---------------------------------------------------------------- endpoints


async def endpoints_list(request: web.Request) -> web.Response:
    async with request.app[POOL].acquire() as conn:
        rows = await store.list_endpoints(conn)
    return _json([store.endpoint_public(r) for r in rows])


async def endpoints_create(request: web.Request) -> web.Response:
    body = await _body(request)
    spec = service.spec_from_fields(body)
    secret = spec.secret or service.new_secret(body.get("signature"))
    settings = request.app[SETTINGS]
    async with request.app[POOL].acquire() as conn:
        row = await store.add_endpoint(conn, spec, secret, settings.secret_box())
    return _json(store.endpoint_public(row, secret=secret), 201)


async def endpoint_get(request: web.Request) -> web.Response:
    eid = _int(request.match_info["id"], "id")
    async with request.app[POOL].acquire() as conn:
        row = await store.get_endpoint(conn, eid)
    return _json(store.endpoint_public(row))


async def endpoint_update(request: web.Request) -> web.Response:
    eid = _int(request.match_info["id"], "id")
    patch = await _body(request)
    if "secret" in patch:
        raise BadInput("use rotate-secret to change a secret")
    if "enabled" in patch:
        raise BadInput("use the disable / enable routes")
    async with request.app[POOL].acquire() as conn, conn.transaction():
        current = await store.get_endpoint(conn, eid)
        spec = service.spec_from_fields(patch, store.spec_from_row(current))
        row = await store.update_endpoint(conn, eid, spec, set(patch))
    return _json(store.endpoint_public(row))


def _toggle(enabled: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        eid = _int(request.match_info["id"], "id")
        async with request.app[POOL].acquire() as conn:
            row = await store.set_enabled(conn, eid, enabled)
        return _json(store.endpoint_public(row))

    return handler


async def endpoint_rotate(request: web.Request) -> web.Response:
    eid = _int(request.match_info["id"], "id")
    body = await _body(request)
    grace = body.get("grace_s", 86_400)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 2**31:
        raise BadInput("grace_s must be a non-negative number")
    settings = request.app[SETTINGS]
    async with request.app[POOL].acquire() as conn:
        row, secret = await service.rotate_secret(conn, eid, float(grace), settings.secret_box())
    doc = store.endpoint_public(row, secret=secret)
    doc["grace_s"] = grace
    return _json(doc)


async def endpoints_health(request: web.Request) -> web.Response:
    async with request.app[POOL].acquire() as conn:
        rows = await store.endpoint_health(
            conn, request.app[SETTINGS].latency_window_s, refresh=_refresh_due(request)
        )
    return _json(rows)


# ---------------------------------------------------------------- events and deliveries


async def events_create(request: web.Request) -> web.Response:
    doc = await _body(request)
    async with request.app[POOL].acquire() as conn:
        result = await service.enqueue_event(conn, doc, request.app[SETTINGS].max_payload_bytes)
    return _json(result, 202)


async def deliveries(request: web.Request) -> web.Response:
    event_id = request.query.get("event_id")
    if not event_id:
        raise BadInput("event_id is required")
    async with request.app[POOL].acquire() as conn:
        rows = await store.deliveries_for_event(conn, event_id)
        attempts = await store.attempts_for_event(conn, event_id)
    by_delivery: dict[int, list[dict[str, Any]]] = {}
    for a in attempts:
        by_delivery.setdefault(a.pop("delivery_id"), []).append(a)
    for r in rows:
        r["attempts"] = by_delivery.get(r["id"], [])
    return _json(rows)


# ---------------------------------------------------------------- dead letters


async def dead_letters(request: web.Request) -> web.Response:
    q = request.query
    endpoint = _int(q["endpoint_id"], "endpoint_id") if "endpoint_id" in q else None
    limit = min(_int(q.get("limit", "100"), "limit"), 1000)
    async with request.app[POOL].acquire() as conn:
        rows = await store.dead_letters_list(conn, endpoint, limit)
    return _json(rows)


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    try:
        value = float(request.query.get(name, str(default)))
    except ValueError:
        raise BadInput(f"{name} must be a number") from None
    if not low <= value <= high:
        raise BadInput(f"{name} must be between {low:g} and {high:g}")
    return value


async def dead_letters_analyze(request: web.Request) -> web.Response:
    hours = _number(request, "hours", 24, 1 / 60, 24 * 365)
    async with request.app[POOL].acquire() as conn:
        rows = await reports.dlq_report(conn, hours)
    return _json(rows)


def _when(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{name} must be an ISO-8601 string")
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"{name} must be an ISO-8601 time") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


async def dead_letters_replay(request: web.Request) -> web.Response:
    body = await _body(request)
    ids = body.get("ids")
    endpoint = body.get("endpoint_id", body.get("endpoint"))
    async with request.app[POOL].acquire() as conn:
        if ids is not None:
            if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 < i < 2**63 for i in ids
            ):
                raise BadInput("ids must be a list of integer ids")
            n = await store.replay_ids(conn, ids)
        elif endpoint is not None:
            if isinstance(endpoint, bool) or not isinstance(endpoint, int) or endpoint <= 0:
                raise BadInput("endpoint_id must be an integer id")
            since = _when(body.get("since"), "since")
            until = _when(body.get("until"), "until")
            n = await store.replay_endpoint(conn, endpoint, since, until)
        else:
            raise BadInput("give ids or endpoint_id")
    return _json({"requeued": n})


# ---------------------------------------------------------------- summaries


async def health(request: web.Request) -> web.Response:
    async with request.app[POOL].acquire() as conn:
        doc = await store.health_summary(conn)
    return _json(doc)


async def timeline(request: web.Request) -> web.Response:
    minutes = _number(request, "minutes", 15, 1, 24 * 60)
    span = minutes * 60
    bucket = max(5.0, span / 90)
    async with request.app[POOL].acquire() as conn:
        rows = await store.timeline(conn, span, bucket)
    return _json({"bucket_s": bucket, "points": rows})


async def alerts(request: web.Request) -> web.Response:
    async with request.app[POOL].acquire() as conn:
        doc = await reports.alerts(conn, request.app[SETTINGS], refresh=_refresh_due(request))
    return _json(doc)


def build_app(settings: Settings, pool: asyncpg.Pool, token: str,
              metrics_: Metrics | None = None) -> web.Application:  # fmt: skip
    app = web.Application(middlewares=[_guard], client_max_size=2 * 1024 * 1024)
    app[POOL] = pool
    app[SETTINGS] = settings
    app[TOKEN] = token
    app[METRICS] = metrics_ or Metrics()
    app[REFRESHED] = [float("-inf")]
    r = app.router
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", metrics)
    r.add_get("/", dashboard)
    r.add_get("/v1/openapi.json", openapi)
    r.add_get("/v1/endpoints", endpoints_list)
    r.add_post("/v1/endpoints", endpoints_create)
    r.add_get("/v1/endpoints/health", endpoints_health)
    r.add_get(r"/v1/endpoints/{id:\d+}", endpoint_get)
    r.add_patch(r"/v1/endpoints/{id:\d+}", endpoint_update)
    r.add_post(r"/v1/endpoints/{id:\d+}/disable", _toggle(False))
    r.add_post(r"/v1/endpoints/{id:\d+}/enable", _toggle(True))
    r.add_post(r"/v1/endpoints/{id:\d+}/rotate-secret", endpoint_rotate)
    r.add_post("/v1/events", events_create)
    r.add_get("/v1/deliveries", deliveries)
    r.add_get("/v1/dead-letters", dead_letters)
    r.add_get("/v1/dead-letters/analyze", dead_letters_analyze)
    r.add_post("/v1/dead-letters/replay", dead_letters_replay)
    r.add_get("/v1/health", health)
    r.add_get("/v1/alerts", alerts)
    r.add_get("/v1/timeline", timeline)
    return app


def parse_bind(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        n = int(port)
    except ValueError:
        raise BadInput(f"--http must be HOST:PORT, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise BadInput("--http port must be 0..65535")
    return host, n


async def start_admin(bind: str, settings: Settings, url: str, metrics_: Metrics | None = None,
                      *, quiet: bool = False) -> web.AppRunner:  # fmt: skip
    host, port = parse_bind(bind)
    token = settings.admin_token
    if token is None:
        token = secrets.token_urlsafe(24)
        sys.stderr.write(f"dispatcher: DISPATCHER_ADMIN_TOKEN unset; this run's token: {token}\n")
    pool = await store.create_pool(url, size=3)
    app = build_app(settings, pool, token, metrics_)

    async def close_pool(_: web.Application) -> None:
        await pool.close()

    app.on_cleanup.append(close_pool)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    if not quiet:
        bound = runner.addresses[0]
        sys.stderr.write(f"dispatcher: admin API on http://{bound[0]}:{bound[1]}/\n")
    return runner
