"""The /v1/ JSON API's handlers (SPEC "Admin HTTP API"): endpoints, events,
dead letters, event types, applications, operational webhooks, the
summaries and the wake-up switch. Each parses the request, calls one
operation (ops.service, ops.eventtypes, ops.tenancy, ops.opswebhooks,
ops.reports, ops.wake) and renders it; errors come out as JSON 4xx through
the guard. Which route calls which handler, and who may, is the route
table's (admin.ROUTES).
"""

from __future__ import annotations

from aiohttp import web

from dispatcher.core.errors import BadInput
from dispatcher.ops import eventtypes, opswebhooks, reports, service, tenancy, wake
from dispatcher.ops.inputs import spec_from_fields
from dispatcher.web.keys import SETTINGS, acquire, read_object, refresh_due
from dispatcher.web.params import (
    FLAGS,
    flag,
    own,
    path_id,
    query_int,
    query_number,
    scope,
    trace_context,
)
from dispatcher.web.routes import Handler
from dispatcher.web.security import json_response as _json

# ---------------------------------------------------------------- endpoints


async def endpoints_list(request: web.Request) -> web.Response:
    app = scope(request)
    async with acquire(request) as conn:
        return _json(await service.list_endpoints(conn, app))


async def endpoints_create(request: web.Request) -> web.Response:
    body = await read_object(request)
    app = scope(request, body.pop("app", None))
    spec = spec_from_fields(body)
    settings = request.app[SETTINGS]
    async with acquire(request) as conn:
        doc = await service.add_endpoint(
            conn,
            spec,
            signature=body.get("signature"),
            box=settings.secret_box(),
            targets=settings.target_policy(),
            app=app,
            within_quota=True,
            charged=own(request),
        )
    return _json(doc, 201)


async def endpoint_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await service.get_endpoint(conn, path_id(request), scope(request)))


async def endpoint_update(request: web.Request) -> web.Response:
    eid = path_id(request)
    patch = await read_object(request)
    scope(request, patch.get("app"))  # naming another application: 403
    settings = request.app[SETTINGS]
    async with acquire(request) as conn:
        doc = await service.update_endpoint(
            conn,
            eid,
            patch,
            box=settings.secret_box(),
            targets=settings.target_policy(),
            app=scope(request),
            charged=own(request),
        )
    return _json(doc)


async def endpoint_delete(request: web.Request) -> web.Response:
    """`?force=true` or a body `{"force": true}`: either one forces."""
    eid = path_id(request)
    body = await read_object(request, ("force", "app"))
    query = request.query.get("force")
    if query is not None and query.lower() not in FLAGS:
        raise BadInput("force must be true or false")
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise BadInput("force must be true or false")
    force = force or (query is not None and FLAGS[query.lower()])
    async with acquire(request) as conn:
        doc = await service.delete_endpoint(
            conn, eid, force, scope(request, body.get("app")), charged=own(request)
        )
    return _json(doc)


def toggle(enabled: bool) -> Handler:
    """POST …/enable or …/disable."""

    async def handler(request: web.Request) -> web.Response:
        async with acquire(request) as conn:
            doc = await service.set_enabled(
                conn, path_id(request), enabled, scope(request), charged=own(request)
            )
            return _json(doc)

    return handler


async def endpoint_rotate(request: web.Request) -> web.Response:
    eid = path_id(request)
    body = await read_object(request, ("grace_s", "app"))
    app = scope(request, body.get("app"))
    box = request.app[SETTINGS].secret_box()
    async with acquire(request) as conn:
        doc = await service.rotate_secret(conn, eid, body.get("grace_s"), box, app)
    return _json(doc)


async def endpoint_test(request: web.Request) -> web.Response:
    eid = path_id(request)
    app = scope(request, (await read_object(request, ("app",))).get("app"))
    async with acquire(request) as conn:
        return _json(await service.send_test_event(conn, eid, app, within_quota=True), 202)


async def endpoints_health(request: web.Request) -> web.Response:
    window_s = request.app[SETTINGS].latency_window_s
    app = scope(request)
    async with acquire(request) as conn:
        rows = await reports.endpoint_health(conn, window_s, refresh=refresh_due(request), app=app)
    return _json(rows)


# ---------------------------------------------------------------- events and deliveries


async def events_create(request: web.Request) -> web.Response:
    doc = await read_object(request)
    app = scope(request, doc.get("app"))
    max_bytes = request.app[SETTINGS].max_payload_bytes
    async with acquire(request) as conn:
        result = await service.enqueue_event(
            conn, doc, max_bytes, app, within_quota=True, trace=trace_context(request)
        )
    return _json(result, 202)


# ---------------------------------------------------------------- dead letters


async def dead_letters_analyze(request: web.Request) -> web.Response:
    hours = query_number(request, "hours")
    async with acquire(request) as conn:
        return _json(await reports.dlq_analyze(conn, hours))


async def dead_letters_replay(request: web.Request) -> web.Response:
    body = await read_object(request, ("ids", "endpoint_id", "endpoint", "since", "until", "app"))
    if "endpoint" in body and "endpoint_id" in body:
        raise BadInput("give endpoint or endpoint_id, not both")
    app = scope(request, body.get("app"))
    async with acquire(request) as conn:
        done = await service.replay(
            conn,
            ids=body.get("ids"),
            endpoint_id=body.get("endpoint_id", body.get("endpoint")),
            since=body.get("since"),
            until=body.get("until"),
            app=app,
            # An application's own credential: what it requeues is taken
            # from its events quota; the operator's replays are not.
            within_quota=own(request),
        )
    return _json({"requeued": done.requeued})


# ---------------------------------------------------------------- event types
# Without ?app= (or "app"), the admin addresses the catalogue-wide scope; an
# application's credential, its own (reads also see the catalogue-wide).


async def event_types_list(request: web.Request) -> web.Response:
    app, limit = scope(request), query_int(request, "limit")
    archived, after = flag(request, "include_archived"), request.query.get("after")
    async with acquire(request) as conn:
        docs = await eventtypes.list_event_types(conn, app, archived, limit, after)
    # Each type's latest schema, not also every version: GET one type for those.
    return _json([{k: v for k, v in d.items() if k != "schemas"} for d in docs])


async def event_types_create(request: web.Request) -> web.Response:
    body = await read_object(request, ("name", *eventtypes.PATCH_FIELDS - {"archived"}, "app"))
    app = scope(request, body.get("app"))
    async with acquire(request) as conn:
        doc = await eventtypes.add_event_type(
            conn, body.get("name"), description=body.get("description"),
            schema=body.get("schema"), schemas=body.get("schemas"), app=app,
            feature_flag=body.get("feature_flag"),
        )  # fmt: skip
    return _json(doc, 201)


async def event_type_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await eventtypes.get_event_type(conn, request.match_info["name"],
                                                     scope(request)))  # fmt: skip


async def event_type_update(request: web.Request) -> web.Response:
    patch = await read_object(request, (*eventtypes.PATCH_FIELDS, "app"))
    app = scope(request, patch.pop("app", None))
    async with acquire(request) as conn:
        return _json(await eventtypes.update_event_type(conn, request.match_info["name"], patch,
                                                        app))  # fmt: skip


async def event_type_delete(request: web.Request) -> web.Response:
    """Archives it; `?expunge=true` removes it."""
    app = scope(request, (await read_object(request, ("app",))).get("app"))
    name, expunge = request.match_info["name"], flag(request, "expunge")
    async with acquire(request) as conn:
        return _json(await eventtypes.delete_event_type(conn, name, app, expunge))


# ---------------------------------------------------------------- applications (admin only)


async def applications_list(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await tenancy.list_applications(conn))


async def applications_create(request: web.Request) -> web.Response:
    body = await read_object(request, ("id", "name"))
    async with acquire(request) as conn:
        return _json(await tenancy.add_application(conn, body.get("id"), body.get("name")), 201)


async def application_update(request: web.Request) -> web.Response:
    """Rename, set or clear (null) quotas: the application document."""
    body = await read_object(request, tenancy.APPLICATION_FIELDS)
    async with acquire(request) as conn:
        return _json(await tenancy.update_application(conn, request.match_info["app"], body))


async def application_token(request: web.Request) -> web.Response:
    body = await read_object(request, ("ttl_s",))
    async with acquire(request) as conn:
        doc = await tenancy.issue_token(conn, request.match_info["app"], body.get("ttl_s"))
    return _json(doc, 201)


async def application_portal_link(request: web.Request) -> web.Response:
    """`base_url` defaults to this server's own address as the caller reached it."""
    body = await read_object(request, ("base_url", "ttl_s"))
    base = body.get("base_url") or f"{request.scheme}://{request.host}"
    async with acquire(request) as conn:
        doc = await tenancy.portal_link(conn, request.match_info["app"], base, body.get("ttl_s"))
    return _json(doc, 201)


async def application_revoke_portal(request: web.Request) -> web.Response:
    """Every portal code and session of the application ended: the counts."""
    await read_object(request, ())
    async with acquire(request) as conn:
        return _json(await tenancy.revoke_portal(conn, request.match_info["app"]))


# ---------------------------------------------------------------- operational webhooks
# The admin's: the operator's (no "app") or any application's; an
# application's credential: its own application's only (SPEC "Operational
# webhooks"), the operator's reading as missing.

_OPS_FIELDS = ("url", "event_types", "app", "secret", "description")


async def ops_webhooks_list(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await opswebhooks.list_webhooks(conn, scope(request)))


async def ops_webhooks_create(request: web.Request) -> web.Response:
    body = await read_object(request, _OPS_FIELDS)
    settings = request.app[SETTINGS]
    async with acquire(request) as conn:
        doc = await opswebhooks.add(
            conn, body.get("url"), event_types=body.get("event_types"),
            app=scope(request, body.get("app")), secret=body.get("secret"),
            description=body.get("description"), box=settings.secret_box(),
            targets=settings.target_policy(), within_quota=True,
        )  # fmt: skip
    return _json(doc, 201)


async def ops_webhook_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await opswebhooks.get(conn, path_id(request), scope(request)))


async def ops_webhook_update(request: web.Request) -> web.Response:
    wid = path_id(request)
    patch = await read_object(request, (*opswebhooks.FIELDS, "app"))
    app = scope(request, patch.get("app"))
    targets = request.app[SETTINGS].target_policy()
    async with acquire(request) as conn:
        return _json(await opswebhooks.update(conn, wid, patch, app=app, targets=targets))


async def ops_webhook_delete(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await opswebhooks.delete(conn, path_id(request), scope(request)))


# ---------------------------------------------------------------- summaries


async def health(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await reports.health_summary(conn))


async def timeline(request: web.Request) -> web.Response:
    minutes = query_number(request, "minutes")
    async with acquire(request) as conn:
        return _json(await reports.timeline(conn, minutes))


async def endpoint_activity(request: web.Request) -> web.Response:
    eid = path_id(request)
    minutes = query_number(request, "minutes")
    async with acquire(request) as conn:
        return _json(await reports.endpoint_activity(conn, eid, minutes))


async def alerts(request: web.Request) -> web.Response:
    window_s = request.app[SETTINGS].latency_window_s
    async with acquire(request) as conn:
        doc = await reports.alerts(conn, window_s, refresh=refresh_due(request))
    return _json(doc)


async def wake_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(await wake.wake_mode(conn))


async def wake_put(request: web.Request) -> web.Response:
    body = await read_object(request, ("wake",))
    async with acquire(request) as conn:
        return _json(await wake.set_wake_mode(conn, body.get("wake")))
