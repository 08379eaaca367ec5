"""The admin HTTP API (aiohttp.web): health probes, metrics, JSON under /v1/.

An entry point: it wires the service, reports and metrics together; who may
call it and what every answer carries is web.security's, the dashboard's
pages are web.pages', the portal's web.portal's. Everything but
/healthz, /readyz and the sign-ins requires `Authorization: Bearer
$DISPATCHER_ADMIN_TOKEN` (or the dashboard's session cookie), or for the
routes an application may use, one of its `dtk_` tokens (or a portal
session): such a call acts inside that application only (`_scope`).
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import aiohttp
import aiohttp.http_exceptions
import asyncpg
import orjson
from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput, Forbidden
from dispatcher.metrics import CONTENT_TYPE, Metrics
from dispatcher.ops import reports, service, tenancy
from dispatcher.ops.inputs import spec_from_fields
from dispatcher.settings import Settings
from dispatcher.web import pages, portal, security
from dispatcher.web.openapi import OPENAPI
from dispatcher.web.security import json_response as _json

POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
REFRESHED: web.AppKey[list[float]] = web.AppKey("percentiles_refreshed", list)
PERCENTILE_REFRESH_S = 5.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _conn(request: web.Request) -> contextlib.AbstractAsyncContextManager[db.Conn]:
    return db.acquire(request.app[POOL])


async def _body(request: web.Request, allowed: Collection[str] | None = None) -> dict[str, Any]:
    """The JSON object a request carries; with `allowed`, no other field."""
    try:
        raw = await request.read()
    except web.HTTPException:
        raise
    except (aiohttp.ClientPayloadError, aiohttp.http_exceptions.HttpProcessingError,
            web.RequestPayloadError, ValueError):  # fmt: skip
        # A body that does not match its Content-Encoding, or is cut short:
        # the connection is in no state to carry another request.
        request[security.BODY_BROKEN] = True
        raise BadInput("request body cannot be decoded (check Content-Encoding)") from None
    if not raw:
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadInput("request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadInput("request body must be a JSON object")
    if allowed is not None:
        unknown = sorted(set(doc) - set(allowed))
        if unknown:
            raise BadInput(f"unknown field: {unknown[0]}")
    return doc


def _int(value: str, name: str) -> int:
    # ASCII digits only: int() also reads other scripts' digits ("٣" is 3).
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise BadInput(f"{name} must be a positive integer")
    n = int(value)
    if not 0 < n < 2**63:
        raise BadInput(f"{name} is out of range")
    return n


def _scope(request: web.Request, named: Any = None) -> str | None:
    """The application a call acts in, from `named` (a body's "app") or
    `?app=`. An application's credential: its own (naming another, in a
    body or the query, is 403). The admin: the one named, None for all (or,
    where something is created, the default)."""
    query = request.query.get("app")
    if named is not None and not isinstance(named, str):
        raise BadInput("app must be an application id")
    own: str | None = request.get(security.APP)
    if own is not None:
        if any(n is not None and n != own for n in (named, query)):
            raise Forbidden("this credential acts only inside its own application")
        return own
    if named is not None and query is not None and named != query:
        raise BadInput("app is given twice, differently")
    return named if named is not None else query


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
        async with _conn(request) as conn:
            current = await db.migrations_current(conn)
    except db.DATABASE_ERRORS:
        return _json({"ready": False, "reason": "database unreachable"}, 503)
    if not current:
        return _json({"ready": False, "reason": "migrations pending"}, 503)
    return _json({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    window_s = request.app[SETTINGS].latency_window_s
    async with _conn(request) as conn:
        g, alerts = await reports.metrics_view(conn, window_s, refresh=_refresh_due(request))
    m.set_database_view(
        {"pending": g.pending, "failed": g.failed, "in_flight": g.in_flight,
         "dead_letter": g.dead_letter},
        g.oldest_pending_s,
        {"closed": g.closed, "open": g.open, "half_open": g.half_open},
        alerts,
    )  # fmt: skip
    return web.Response(body=m.render(), headers={"Content-Type": CONTENT_TYPE})


async def openapi(_: web.Request) -> web.Response:
    return _json(OPENAPI)


# ---------------------------------------------------------------- endpoints


def _id(request: web.Request) -> int:
    return _int(request.match_info["id"], "id")


async def endpoints_list(request: web.Request) -> web.Response:
    app = _scope(request)
    async with _conn(request) as conn:
        return _json(await service.list_endpoints(conn, app))


async def endpoints_create(request: web.Request) -> web.Response:
    body = await _body(request)
    app = _scope(request, body.pop("app", None))
    spec = spec_from_fields(body)
    settings = request.app[SETTINGS]
    async with _conn(request) as conn:
        doc = await service.add_endpoint(
            conn,
            spec,
            signature=body.get("signature"),
            box=settings.secret_box(),
            targets=settings.target_policy(),
            app=app,
            within_quota=True,
        )
    return _json(doc, 201)


async def endpoint_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await service.get_endpoint(conn, _id(request), _scope(request)))


async def endpoint_update(request: web.Request) -> web.Response:
    eid = _id(request)
    patch = await _body(request)
    _scope(request, patch.get("app"))  # naming another application: 403
    settings = request.app[SETTINGS]
    async with _conn(request) as conn:
        doc = await service.update_endpoint(
            conn,
            eid,
            patch,
            box=settings.secret_box(),
            targets=settings.target_policy(),
            app=_scope(request),
        )
    return _json(doc)


_FLAGS = {"true": True, "1": True, "false": False, "0": False}


async def endpoint_delete(request: web.Request) -> web.Response:
    """`?force=true` or a body `{"force": true}`: either one forces."""
    eid = _id(request)
    body = await _body(request, ("force", "app"))
    query = request.query.get("force")
    if query is not None and query.lower() not in _FLAGS:
        raise BadInput("force must be true or false")
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise BadInput("force must be true or false")
    force = force or (query is not None and _FLAGS[query.lower()])
    async with _conn(request) as conn:
        doc = await service.delete_endpoint(conn, eid, force, _scope(request, body.get("app")))
    return _json(doc)


def _toggle(enabled: bool) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        async with _conn(request) as conn:
            return _json(await service.set_enabled(conn, _id(request), enabled, _scope(request)))

    return handler


async def endpoint_rotate(request: web.Request) -> web.Response:
    eid = _id(request)
    body = await _body(request, ("grace_s", "app"))
    app = _scope(request, body.get("app"))
    box = request.app[SETTINGS].secret_box()
    async with _conn(request) as conn:
        doc = await service.rotate_secret(conn, eid, body.get("grace_s"), box, app)
    return _json(doc)


async def endpoint_test(request: web.Request) -> web.Response:
    eid = _id(request)
    app = _scope(request, (await _body(request, ("app",))).get("app"))
    async with _conn(request) as conn:
        return _json(await service.send_test_event(conn, eid, app, within_quota=True), 202)


async def endpoints_health(request: web.Request) -> web.Response:
    window_s = request.app[SETTINGS].latency_window_s
    app = _scope(request)
    async with _conn(request) as conn:
        rows = await reports.endpoint_health(conn, window_s, refresh=_refresh_due(request), app=app)
    return _json(rows)


# ---------------------------------------------------------------- events and deliveries


async def events_create(request: web.Request) -> web.Response:
    doc = await _body(request)
    app = _scope(request, doc.get("app"))
    max_bytes = request.app[SETTINGS].max_payload_bytes
    async with _conn(request) as conn:
        result = await service.enqueue_event(conn, doc, max_bytes, app, within_quota=True)
    return _json(result, 202)


async def deliveries(request: web.Request) -> web.Response:
    """One event's deliveries with their attempts (`?event_id=`), or
    without it the newest deliveries (`?status=`, `?endpoint_id=`, `?limit=`)."""
    app = _scope(request)
    event_id = request.query.get("event_id")
    async with _conn(request) as conn:
        if event_id is not None:
            return _json(await reports.deliveries_for_event(conn, event_id, app))
        return _json(
            await reports.recent_deliveries(
                conn,
                app=app,
                status=request.query.get("status"),
                endpoint_id=_query_int(request, "endpoint_id"),
                limit=_query_int(request, "limit"),
            )
        )


# ---------------------------------------------------------------- dead letters


def _query_int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    return None if value is None else _int(value, name)


def _query_number(request: web.Request, name: str) -> float | None:
    value = request.query.get(name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise BadInput(f"{name} must be a number") from None


async def dead_letters(request: web.Request) -> web.Response:
    endpoint = _query_int(request, "endpoint_id")
    limit = _query_int(request, "limit")
    app = _scope(request)
    async with _conn(request) as conn:
        return _json(await reports.dead_letters(conn, endpoint, limit, app))


async def dead_letters_analyze(request: web.Request) -> web.Response:
    hours = _query_number(request, "hours")
    async with _conn(request) as conn:
        return _json(await reports.dlq_analyze(conn, hours))


async def dead_letters_replay(request: web.Request) -> web.Response:
    body = await _body(request, ("ids", "endpoint_id", "endpoint", "since", "until", "app"))
    if "endpoint" in body and "endpoint_id" in body:
        raise BadInput("give endpoint or endpoint_id, not both")
    app = _scope(request, body.get("app"))
    async with _conn(request) as conn:
        done = await service.replay(
            conn,
            ids=body.get("ids"),
            endpoint_id=body.get("endpoint_id", body.get("endpoint")),
            since=body.get("since"),
            until=body.get("until"),
            app=app,
        )
    return _json({"requeued": done.requeued})


# ---------------------------------------------------------------- applications (admin only)


async def applications_list(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await tenancy.list_applications(conn))


async def applications_create(request: web.Request) -> web.Response:
    body = await _body(request, ("id", "name"))
    async with _conn(request) as conn:
        return _json(await tenancy.add_application(conn, body.get("id"), body.get("name")), 201)


async def application_update(request: web.Request) -> web.Response:
    """Rename, set or clear (null) quotas: the application document."""
    body = await _body(request, tenancy.APPLICATION_FIELDS)
    async with _conn(request) as conn:
        return _json(await tenancy.update_application(conn, request.match_info["app"], body))


async def application_token(request: web.Request) -> web.Response:
    body = await _body(request, ("ttl_s",))
    async with _conn(request) as conn:
        doc = await tenancy.issue_token(conn, request.match_info["app"], body.get("ttl_s"))
    return _json(doc, 201)


async def application_portal_link(request: web.Request) -> web.Response:
    """`base_url` defaults to this server's own address as the caller reached it."""
    body = await _body(request, ("base_url", "ttl_s"))
    base = body.get("base_url") or f"{request.scheme}://{request.host}"
    async with _conn(request) as conn:
        doc = await tenancy.portal_link(conn, request.match_info["app"], base, body.get("ttl_s"))
    return _json(doc, 201)


# ---------------------------------------------------------------- summaries


async def health(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(await reports.health_summary(conn))


async def timeline(request: web.Request) -> web.Response:
    minutes = _query_number(request, "minutes")
    async with _conn(request) as conn:
        return _json(await reports.timeline(conn, minutes))


async def endpoint_activity(request: web.Request) -> web.Response:
    eid = _id(request)
    minutes = _query_number(request, "minutes")
    async with _conn(request) as conn:
        return _json(await reports.endpoint_activity(conn, eid, minutes))


async def alerts(request: web.Request) -> web.Response:
    window_s = request.app[SETTINGS].latency_window_s
    async with _conn(request) as conn:
        doc = await reports.alerts(conn, window_s, refresh=_refresh_due(request))
    return _json(doc)


def build_app(settings: Settings, pool: asyncpg.Pool, token: str,
              metrics_: Metrics | None = None) -> web.Application:  # fmt: skip
    app = web.Application(middlewares=[security.guard], client_max_size=2 * 1024 * 1024)
    security.install(app, token, portal.install(app, pool),
                         failures_per_min=settings.auth_failures_per_min)  # fmt: skip
    app[POOL] = pool
    app[SETTINGS] = settings
    app[METRICS] = metrics_ or Metrics()
    app[REFRESHED] = [float("-inf")]
    r = app.router
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", metrics)
    pages.add_routes(r)
    r.add_get("/v1/openapi.json", openapi)
    r.add_get("/openapi.json", openapi)  # where tools look first; same document, same auth
    r.add_get("/v1/endpoints", endpoints_list)
    r.add_post("/v1/endpoints", endpoints_create)
    r.add_get("/v1/endpoints/health", endpoints_health)
    r.add_get(r"/v1/endpoints/{id:[0-9]+}", endpoint_get)
    r.add_patch(r"/v1/endpoints/{id:[0-9]+}", endpoint_update)
    r.add_delete(r"/v1/endpoints/{id:[0-9]+}", endpoint_delete)
    r.add_post(r"/v1/endpoints/{id:[0-9]+}/disable", _toggle(False))
    r.add_post(r"/v1/endpoints/{id:[0-9]+}/enable", _toggle(True))
    r.add_post(r"/v1/endpoints/{id:[0-9]+}/rotate-secret", endpoint_rotate)
    r.add_post(r"/v1/endpoints/{id:[0-9]+}/test", endpoint_test)
    r.add_get(r"/v1/endpoints/{id:[0-9]+}/activity", endpoint_activity)
    r.add_post("/v1/events", events_create)
    r.add_get("/v1/deliveries", deliveries)
    r.add_get("/v1/dead-letters", dead_letters)
    r.add_get("/v1/dead-letters/analyze", dead_letters_analyze)
    r.add_post("/v1/dead-letters/replay", dead_letters_replay)
    r.add_get("/v1/health", health)
    r.add_get("/v1/alerts", alerts)
    r.add_get("/v1/timeline", timeline)
    r.add_get("/v1/applications", applications_list)
    r.add_post("/v1/applications", applications_create)
    r.add_patch("/v1/applications/{app}", application_update)
    r.add_post("/v1/applications/{app}/tokens", application_token)
    r.add_post("/v1/applications/{app}/portal-links", application_portal_link)
    portal.add_routes(r)
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
    pool = await db.create_pool(url, size=3)
    app = build_app(settings, pool, token, metrics_)

    async def close_pool(_: web.Application) -> None:
        await pool.close()

    app.on_cleanup.append(close_pool)
    runner = security.HardenedRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2)
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
