"""The Svix-compatible API under /api/v1/ (SPEC "The Svix-compatible API"):
its route table (`ROUTES`, joined into admin.ROUTES), so the guard, the
tenancy rules and the OpenAPI document cover it too.

An entry point like `/v1/`: its handlers read Svix's camelCase bodies,
call the same operations (ops.service, ops.tenancy, and ops.svix for what
only Svix has) and answer in the shapes the official SDKs parse. They are
grouped by what they address: applications, the portal link and health
(web.svix_apps), endpoints (web.svix_endpoints), messages and attempts
(web.svix_messages), event types (web.svix_event_types), the operator's
operational webhooks (web.svix_operational); what they share (the
caller's scope, the body, lists and iterators) is web.svix_common's.
Errors are `{"code", "detail"}` (security.error_response), lists are
`{"data", "iterator", "prevIterator", "done"}`.

Ids: an application's is ours (its `uid`, when it fits our id syntax, or
`app_…`); an endpoint's is our integer as a string; a message's is the
event id of its deliveries (its `eventId` when given, else `msg_…`).
Path parameters take an id or a uid, as Svix's do.
"""

from __future__ import annotations

import re
from typing import Any

from dispatcher.web.routes import Access, Handler, Route
from dispatcher.web.svix_apps import (
    app_delete,
    app_get,
    app_update,
    apps_create,
    apps_list,
    health,
    portal_access,
)
from dispatcher.web.svix_endpoints import (
    endpoint_delete,
    endpoint_get,
    endpoint_headers,
    endpoint_recover,
    endpoint_rotate,
    endpoint_secret,
    endpoint_update,
    endpoints_create,
    endpoints_list,
    headers_update,
)
from dispatcher.web.svix_event_types import (
    event_type_delete,
    event_type_get,
    event_type_update,
    event_types_create,
    event_types_list,
)
from dispatcher.web.svix_messages import (
    attempts,
    message_expunge_content,
    message_get,
    message_resend,
    messages_bulk_expunge,
    messages_create,
    messages_expunge_all,
    messages_list,
)
from dispatcher.web.svix_operational import (
    ops_endpoint_delete,
    ops_endpoint_get,
    ops_endpoint_rotate,
    ops_endpoint_secret,
    ops_endpoint_update,
    ops_endpoints_create,
    ops_endpoints_list,
)

OPEN, ADMIN, APP = Access.OPEN, Access.ADMIN, Access.APP
A = "/api/v1/app/{app_id}"
E = A + "/endpoint/{endpoint_id}"
OPS = "/api/v1/operational-webhook/endpoint"


_PARAM = re.compile(r"\{(\w+)\}")
_KEY = {"type": "string", "pattern": "^[a-zA-Z0-9_.-]{1,256}$"}
_OBJECT = {"type": "object"}
_RESPONSES = {
    "401": {"description": "Missing or wrong token"},
    "403": {"description": "Outside the application of the credential"},
    "404": {"description": "Not found: `{code, detail}`"},
    "409": {"description": "Conflict: `{code, detail}`"},
    "422": {"description": "Invalid input: `{code, detail: [{loc, msg, type}]}`"},
}


def _route(
    method: str,
    path: str,
    access: Access,
    handler: Handler,
    summary: str,
    code: str = "200",
    *,
    body: bool = False,
) -> Route:
    """A row of the table with its OpenAPI operation: the path's
    parameters (an id or a uid each), a JSON body when it takes one."""
    operation: dict[str, Any] = {
        "summary": f"Svix: {summary}",
        "tags": ["svix"],
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": _KEY}
            for name in _PARAM.findall(path)
        ],
        "responses": {code: {"description": "OK"}, **_RESPONSES},
    }
    if body:
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": _OBJECT}},
        }
    return Route(method, path, access, handler, operation)


# fmt: off
ROUTES: tuple[Route, ...] = (
    _route("GET",    "/api/v1/health", OPEN, health, "health", "204"),
    _route("GET",    "/api/v1/app", ADMIN, apps_list, "list applications"),
    _route("POST",   "/api/v1/app", ADMIN, apps_create,
           "create an application (?get_if_exists=true: or get it by uid)", "201", body=True),
    _route("GET",    A, APP, app_get, "get an application by id or uid"),
    _route("PUT",    A, APP, app_update(False), "create or replace an application", body=True),
    _route("PATCH",  A, APP, app_update(True), "change an application", body=True),
    _route("DELETE", A, ADMIN, app_delete, "delete an application and its endpoints", "204"),
    _route("GET",    A + "/endpoint", APP, endpoints_list, "list endpoints"),
    _route("POST",   A + "/endpoint", APP, endpoints_create, "create an endpoint", "201",
           body=True),
    _route("GET",    E, APP, endpoint_get, "get an endpoint by id or uid"),
    _route("PUT",    E, APP, endpoint_update(False), "replace an endpoint", body=True),
    _route("PATCH",  E, APP, endpoint_update(True), "change an endpoint", body=True),
    _route("DELETE", E, APP, endpoint_delete,
           "delete an endpoint (what it has queued is dead-lettered)", "204"),
    _route("GET",    E + "/secret", APP, endpoint_secret, "the endpoint's signing secret"),
    _route("POST",   E + "/secret/rotate", APP, endpoint_rotate,
           "rotate the secret (the old one signs for 24 h more)", body=True),
    _route("GET",    E + "/headers", APP, endpoint_headers, "the endpoint's extra header names"),
    _route("PUT",    E + "/headers", APP, headers_update(False),
           "replace the endpoint's headers", "204", body=True),
    _route("PATCH",  E + "/headers", APP, headers_update(True),
           "change some of the endpoint's headers", "204", body=True),
    _route("POST",   E + "/recover", APP, endpoint_recover,
           "send the endpoint's dead letters since a time again", "202", body=True),
    _route("POST",   A + "/msg", APP, messages_create, "send a message", "202", body=True),
    _route("GET",    A + "/msg", APP, messages_list, "list messages, newest first"),
    _route("GET",    A + "/msg/{msg_id}", APP, message_get, "get a message by id or eventId"),
    _route("POST",   A + "/msg/{msg_id}/endpoint/{endpoint_id}/resend", APP, message_resend,
           "send a message to an endpoint again", "202", body=True),
    _route("DELETE", A + "/msg/{msg_id}/content", APP, message_expunge_content,
           "erase a message's payload (it can no longer be resent)", "204"),
    _route("POST",   A + "/msg/bulk-expunge", APP, messages_bulk_expunge,
           "erase the payloads of the messages given by id", body=True),
    _route("POST",   A + "/msg/expunge-all-contents", APP, messages_expunge_all,
           "erase every message payload of the application", "202"),
    _route("GET",    A + "/attempt/msg/{msg_id}", APP, attempts("msg"), "a message's attempts"),
    _route("GET",    A + "/attempt/endpoint/{endpoint_id}", APP, attempts("endpoint"),
           "an endpoint's attempts"),
    _route("POST",   "/api/v1/auth/app-portal-access/{app_id}", APP, portal_access,
           "a one-time sign-in link to the application's portal", body=True),
    _route("GET",    OPS, ADMIN, ops_endpoints_list, "list the operator's operational webhooks"),
    _route("POST",   OPS, ADMIN, ops_endpoints_create, "add an operational webhook", "201",
           body=True),
    _route("GET",    OPS + "/{endpoint_id}", ADMIN, ops_endpoint_get,
           "get an operational webhook"),
    _route("PUT",    OPS + "/{endpoint_id}", ADMIN, ops_endpoint_update,
           "change an operational webhook", body=True),
    _route("DELETE", OPS + "/{endpoint_id}", ADMIN, ops_endpoint_delete,
           "delete an operational webhook", "204"),
    _route("GET",    OPS + "/{endpoint_id}/secret", ADMIN, ops_endpoint_secret,
           "an operational webhook's signing secret"),
    _route("POST",   OPS + "/{endpoint_id}/secret/rotate", ADMIN, ops_endpoint_rotate,
           "rotate an operational webhook's secret", body=True),
    _route("GET",    "/api/v1/event-type", APP, event_types_list,
           "list event types (an application's: its own and the catalogue-wide ones)"),
    _route("POST",   "/api/v1/event-type", APP, event_types_create, "create an event type",
           "201", body=True),
    _route("GET",    "/api/v1/event-type/{name}", APP, event_type_get, "get an event type"),
    _route("PUT",    "/api/v1/event-type/{name}", APP, event_type_update(False),
           "create or replace an event type", body=True),
    _route("PATCH",  "/api/v1/event-type/{name}", APP, event_type_update(True),
           "change an event type", body=True),
    _route("DELETE", "/api/v1/event-type/{name}", APP, event_type_delete,
           "archive an event type (?expunge=true: remove it)", "204"),
)
# fmt: on
