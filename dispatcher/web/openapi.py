"""The OpenAPI 3.0 document served at /v1/openapi.json and /openapi.json:
one operation object per /v1/ route, by area (probes, endpoints, event
types, events and deliveries, operational webhooks, summaries, the wake-up
switch, applications, the portal, postback tooling), and `document`, whose
paths are the route table's (admin.ROUTES). The schemas and pieces the
operations are made of are web.openapi_schemas'; the Svix routes carry
their own operations (web.svix).
"""

# ruff: noqa: E501
# fmt: off

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dispatcher.web.openapi_schemas import (
    APP,
    APP_PATH,
    APP_QUERY,
    DOCUMENT,
    ID,
    INT,
    NUM,
    QUOTAS,
    REFUSED,
    STR,
    TS,
    TTL,
    ok,
    ref,
    request_body,
)
from dispatcher.web.routes import Access, Route

# ---------------------------------------------------------------- operations
# One per row of the route table (admin.ROUTES), which says its method, its
# path and who may call it: a route the guard leaves open gets "security": [].

HEALTHZ = {"summary": "Process alive", "responses": {"200": {"description": "alive"}}}
READYZ = {"summary": "Database reachable and migrated",
          "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}}}
METRICS = {"summary": "Prometheus metrics",
           "responses": {"200": {"description": "text exposition"}, "401": {"description": "token"}}}
OPENAPI_V1 = {"summary": "This document", "responses": ok({"type": "object"})}
OPENAPI_ROOT = {"summary": "This document (also at /v1/openapi.json)", "responses": ok({"type": "object"})}

# -- endpoints
_ONE = [ID, APP_QUERY]  # every /v1/endpoints/{id} route but activity
ENDPOINTS_LIST = {"summary": "List endpoints (of one application with ?app=)", "parameters": [APP_QUERY],
                  "responses": ok({"type": "array", "items": ref("Endpoint")})}
ENDPOINTS_CREATE = {"summary": "Create an endpoint (the response carries its secret)",
                    "requestBody": request_body(ref("EndpointCreate")),
                    "responses": {**ok(ref("Endpoint"), "201"),
                                  "409": {"description": "The application has max_endpoints live endpoints", **REFUSED}}}
ENDPOINTS_HEALTH = {"summary": "Breaker state, percentiles, attempts and 2xx share "
                               "over the last hour, per endpoint",
                    "parameters": [APP_QUERY],
                    "responses": ok({"type": "array", "items": {"type": "object"}})}
ENDPOINT_GET = {"summary": "One endpoint", "parameters": _ONE, "responses": ok(ref("Endpoint"))}
ENDPOINT_UPDATE = {"summary": "Update settings", "parameters": _ONE,
                   "requestBody": request_body(ref("EndpointUpdate")), "responses": ok(ref("Endpoint"))}
ENDPOINT_DELETE = {
    "summary": "Delete (no longer listed, gets nothing more; dead letters and history stay). "
               "Refused with 409 while it has pending, failed or in-flight deliveries, unless "
               "force (query or body), which first dead-letters them ('endpoint deleted')",
    "parameters": [*_ONE, {"name": "force", "in": "query", "schema": {"type": "boolean"}}],
    "requestBody": request_body({"type": "object", "properties": {"force": {"type": "boolean"}, "app": APP},
                          "additionalProperties": False}, False),
    "responses": {
        **ok(ref("Deleted")),
        "409": {"description": "Has queued deliveries", "content": {"application/json": {"schema": ref("Error")}}},
    },
}
ENDPOINT_DISABLE = {"summary": "Stop deliveries (nothing queued is lost)", "parameters": _ONE,
                    "responses": ok(ref("Endpoint"))}
ENDPOINT_ENABLE = {"summary": "Resume deliveries", "parameters": _ONE, "responses": ok(ref("Endpoint"))}
ENDPOINT_ROTATE = {
    "summary": "New secret; the old one signs alongside it for grace_s", "parameters": _ONE,
    "requestBody": request_body({"type": "object", "properties": {"grace_s": {"type": "number", "minimum": 0}, "app": APP}}, False),
    "responses": ok(ref("Endpoint"))}
ENDPOINT_TEST = {
    "summary": "Enqueue one dispatcher.test event to this endpoint only", "parameters": _ONE,
    "requestBody": request_body({"type": "object", "properties": {"app": APP}, "additionalProperties": False}, False),
    "responses": ok(ref("Enqueued"), "202")}
ENDPOINT_ACTIVITY = {
    "summary": "One endpoint over the last minutes: p50/p95/p99, attempts and failures per "
               "bucket (oldest first), its newest breaker transitions and failed attempts",
    "parameters": [ID, {"name": "minutes", "in": "query", "schema": {"type": "number", "minimum": 1, "maximum": 1440}}],
    "responses": ok({"type": "object", "properties": {
        "bucket_s": NUM,
        "latency": {"type": "array", "items": {"type": "object", "properties": {
            "ago": INT, "p50_ms": {"type": "number", "nullable": True},
            "p95_ms": {"type": "number", "nullable": True},
            "p99_ms": {"type": "number", "nullable": True},
            "attempts": INT, "failures": INT}}},
        "transitions": {"type": "array", "items": {"type": "object", "properties": {
            "from_state": STR, "to_state": STR, "cooldown_seconds": {"type": "number", "nullable": True},
            "at": TS}}},
        "failures": {"type": "array", "items": {"type": "object", "properties": {
            "delivery_id": {"type": "integer", "nullable": True},
            "event_id": {"type": "string", "nullable": True},
            "event_type": {"type": "string", "nullable": True}, "at": TS,
            "status_code": {"type": "integer", "nullable": True}, "response_ms": INT,
            "error": {"type": "string", "nullable": True}}}},
    }})}

# -- event types
_UNPROCESSABLE = {"description": "Refused by its event type (archived, or the payload fails "
                                 "its schema: the error names the path); nothing queued", **REFUSED}
_TYPE_NAME = {"name": "name", "in": "path", "required": True,
              "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,256}$"}}
_TYPE_FIELDS: dict[str, Any] = {
    "description": {"type": "string", "maxLength": 2000, "nullable": True},
    "schema": {"type": "object", "nullable": True, "description": "a JSON Schema, draft 2020-12"},
    "schemas": {"type": "object", "nullable": True, "description": "Svix's map of version to schema"},
    "feature_flag": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,256}$", "nullable": True},
}
EVENT_TYPES_LIST = {
    "summary": "The catalogue-wide event types and, with an application, its own, by name",
    "parameters": [APP_QUERY,
                   {"name": "include_archived", "in": "query", "schema": {"type": "boolean"}},
                   {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                   {"name": "after", "in": "query", "schema": STR,
                    "description": "the last name of the previous page"}],
    "responses": ok({"type": "array", "items": ref("EventType")})}
EVENT_TYPES_CREATE = {
    "summary": "Add an event type (catalogue-wide, or with app an application's own); a name "
               "taken in that scope answers 409",
    "requestBody": request_body({"type": "object", "properties": {
        "name": _TYPE_NAME["schema"], **_TYPE_FIELDS, "app": APP},
        "required": ["name"], "additionalProperties": False}),
    "responses": {**ok(ref("EventType"), "201"),
                  "409": {"description": "Exists", **REFUSED}}}
EVENT_TYPE_GET = {"summary": "One event type (an application's own first, else catalogue-wide)",
                  "parameters": [_TYPE_NAME, APP_QUERY], "responses": ok(ref("EventType"))}
EVENT_TYPE_UPDATE = {
    "summary": "Change description, schema, archived or feature_flag (an application may not "
               "change a catalogue-wide type: 403)",
    "parameters": [_TYPE_NAME, APP_QUERY],
    "requestBody": request_body({"type": "object", "properties": {
        **_TYPE_FIELDS, "archived": {"type": "boolean"}, "app": APP},
        "additionalProperties": False}),
    "responses": ok(ref("EventType"))}
EVENT_TYPE_DELETE = {
    "summary": "Archive it (it accepts no new events); ?expunge=true removes it",
    "parameters": [_TYPE_NAME, APP_QUERY,
                   {"name": "expunge", "in": "query", "schema": {"type": "boolean"}}],
    "requestBody": request_body({"type": "object", "properties": {"app": APP},
                          "additionalProperties": False}, False),
    "responses": ok(ref("EventType"))}

# -- events, deliveries, dead letters
EVENTS_CREATE = {"summary": "Enqueue an event (fan-out to subscribers)",
                 "requestBody": request_body(ref("Event")),
                 "responses": {**ok(ref("Enqueued"), "202"), "422": _UNPROCESSABLE,
                               "429": {"description": "Over the application's max_events_per_s; nothing "
                                                      "queued; try again after Retry-After seconds",
                                       "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
                                       **REFUSED}}}
_DELIVERY_FIELDS: dict[str, Any] = {
    "id": INT, "endpoint_id": INT, "app": STR, "event_id": STR, "event_type": STR,
    "status": {"type": "string", "enum": ["pending", "in_flight", "delivered", "failed", "dead_letter",
                                          "held", "cancelled"]},
    "attempt_count": INT, "max_attempts": INT, "created_at": TS, "next_attempt_at": TS,
    "delivered_at": TS, "updated_at": TS, "last_error": {"type": "string", "nullable": True},
    "last_status_code": {"type": "integer", "nullable": True},
    "last_response_ms": {"type": "integer", "nullable": True},
    "payload_expired": {"type": "boolean"},
}
_ATTEMPT = {"type": "object", "properties": {
    "at": TS, "status_code": {"type": "integer", "nullable": True}, "response_ms": INT,
    "error": {"type": "string", "nullable": True}}}
_ENDPOINT_QUERY = {"name": "endpoint_id", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 2**62}}
_LIMIT_QUERY = {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}
_CURSOR_QUERY = {"name": "cursor", "in": "query", "schema": {"type": "string", "maxLength": 40},
                 "description": "the next_cursor (X-Next-Cursor) of the page before; opaque"}
DELIVERIES = {
    "summary": "Deliveries, newest first, filtered by any of status, endpoint_id, app, event_type, "
               "event_id, since, until (created in [since, until)), a page at a time: next_cursor "
               "is the next page's ?cursor=, null on the last. With event_id, each delivery "
               "carries its attempts",
    "parameters": [
        {"name": "event_id", "in": "query", "schema": {"type": "string", "minLength": 1, "maxLength": 200}},
        {"name": "status", "in": "query", "schema": _DELIVERY_FIELDS["status"]},
        _ENDPOINT_QUERY,
        {"name": "event_type", "in": "query", "schema": {"type": "string", "maxLength": 256}},
        {"name": "since", "in": "query", "schema": {"type": "string", "format": "date-time"}},
        {"name": "until", "in": "query", "schema": {"type": "string", "format": "date-time"}},
        _CURSOR_QUERY, _LIMIT_QUERY, APP_QUERY,
        {"name": "format", "in": "query", "schema": {"type": "string", "enum": ["json", "jsonl", "csv"]},
         "description": "jsonl or csv: every delivery the filter selects, streamed (at most 100,000 "
                        "a request; continue with ?cursor= the last id)"},
    ],
    "responses": ok({"type": "object", "properties": {
        "deliveries": {"type": "array", "items": {"type": "object", "properties": {
            **_DELIVERY_FIELDS, "attempts": {"type": "array", "items": _ATTEMPT}}}},
        "next_cursor": {"type": "string", "nullable": True}}})}
DELIVERY_GET = {
    "summary": "One delivery with its payload (as enqueued) and its attempts, oldest first",
    "parameters": [ID, APP_QUERY],
    "responses": ok({"type": "object", "properties": {
        **_DELIVERY_FIELDS, "payload": {}, "attempts": {"type": "array", "items": _ATTEMPT}}})}
DEAD_LETTERS = {
    "summary": "Dead letters, newest first; the next page's ?cursor= in the X-Next-Cursor "
               "header (absent on the last page)",
    "parameters": [_ENDPOINT_QUERY, _LIMIT_QUERY, _CURSOR_QUERY, APP_QUERY],
    "responses": {**ok({"type": "array", "items": {"type": "object"}}),
                  "200": {"description": "OK", "headers": {"X-Next-Cursor": {"schema": STR}},
                          "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}}}}}
POLL = {
    "summary": "A polling endpoint's deliveries, oldest first; reading with the returned "
               "cursor acknowledges everything it covered (those deliveries are delivered)",
    "parameters": [
        {"name": "endpoint_id", "in": "path", "required": True,
         "schema": {"type": "integer", "minimum": 1, "maximum": 2**62}},
        {"name": "cursor", "in": "query", "schema": {"type": "string", "maxLength": 40},
         "description": "the cursor of the page before; opaque"},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1},
         "description": "capped at 1000"},
        {"name": "wait_s", "in": "query", "schema": {"type": "number", "minimum": 0, "maximum": 30},
         "description": "long poll: wait up to this long when nothing is there"},
        APP_QUERY],
    "responses": ok({"type": "object", "properties": {
        "data": {"type": "array", "items": {"type": "object", "properties": {
            "id": INT, "event_id": STR, "event_type": STR, "timestamp": TS, "payload": {}}}},
        "cursor": {**STR, "nullable": True}, "done": {"type": "boolean"}}})}
DEAD_LETTERS_ANALYZE = {
    "summary": "Per endpoint: count, primary error and status, pattern, suggested action",
    "parameters": [{"name": "hours", "in": "query", "schema": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 8760}}],
    "responses": ok({"type": "array", "items": {"type": "object"}})}
DEAD_LETTERS_REPLAY = {
    "summary": "Move dead letters back to pending with a fresh attempt budget: ids, an "
               "endpoint's (since, until), or without an endpoint every one (of the "
               "application) that died since a time",
    "requestBody": request_body(ref("Replay")),
    "responses": ok({"type": "object", "properties": {"requeued": INT}})}

# -- operational webhooks
_OPS_TYPES = {"type": "array", "items": {"type": "string", "enum": [
    "endpoint.created", "endpoint.updated", "endpoint.deleted", "endpoint.disabled",
    "endpoint.enabled", "message.attempt.exhausted", "message.attempt.failing",
    "message.attempt.recovered"]}, "description": "empty or left out: every type"}
_OPS_WEBHOOK = {"type": "object", "properties": {
    "id": INT, "url": STR, "event_types": _OPS_TYPES,
    "app": {**APP, "nullable": True, "description": "null: the operator's, told about every application"},
    "description": {"type": "string", "nullable": True}, "disabled": {"type": "boolean"},
    "disabled_reason": {"type": "string", "nullable": True},
    "secret": {"type": "string", "description": "in the answer to its creation only"},
    "created_at": TS, "updated_at": TS}}
OPS_WEBHOOKS_LIST = {
    "summary": "Operational webhooks: every one (admin), or one application's (?app=, or its credential)",
    "parameters": [APP_QUERY], "responses": ok({"type": "array", "items": _OPS_WEBHOOK})}
OPS_WEBHOOKS_CREATE = {
    "summary": "Create an operational webhook: the operator's without app (admin), else that "
               "application's; the answer carries its secret",
    "requestBody": request_body({"type": "object", "properties": {
        "url": STR, "event_types": _OPS_TYPES, "app": APP,
        "secret": {"type": "string", "pattern": "^whsec_"}, "description": STR},
        "required": ["url"], "additionalProperties": False}),
    "responses": ok(_OPS_WEBHOOK, "201")}
OPS_WEBHOOK_GET = {"summary": "One operational webhook", "parameters": [ID, APP_QUERY],
                   "responses": ok(_OPS_WEBHOOK)}
OPS_WEBHOOK_UPDATE = {
    "summary": "Change an operational webhook's url, event types, description or disabled",
    "parameters": [ID, APP_QUERY],
    "requestBody": request_body({"type": "object", "properties": {
        "url": STR, "event_types": _OPS_TYPES, "description": {"type": "string", "nullable": True},
        "disabled": {"type": "boolean"}, "app": APP}, "additionalProperties": False}),
    "responses": ok(_OPS_WEBHOOK)}
OPS_WEBHOOK_DELETE = {
    "summary": "Delete an operational webhook (what it still had queued is dead-lettered)",
    "parameters": [ID, APP_QUERY],
    "responses": ok({"type": "object", "properties": {"id": INT, "deleted": {"type": "boolean"}}})}

# -- summaries
HEALTH = {"summary": "One-row pipeline summary", "responses": ok(ref("Health"))}
TIMELINE = {
    "summary": "Enqueued, delivered and dead per bucket, oldest first, and the queue depth "
               "(pending + retrying + in flight) at the end of each bucket",
    "parameters": [{"name": "minutes", "in": "query", "schema": {"type": "number", "minimum": 1, "maximum": 1440}}],
    "responses": ok({"type": "object"})}
ALERTS = {"summary": "The three alert conditions", "responses": ok({"type": "object"})}

# -- the wake-up switch (schema 016)
_WAKE = {"type": "object", "properties": {
    "wake": {"type": "string", "enum": ["probe", "notify"]}, "updated_at": TS}}
WAKE_GET = {"summary": "How idle workers learn of new rows: probe or notify (admin)",
            "responses": ok(_WAKE)}
WAKE_PUT = {
    "summary": "Set the wake-up switch; running workers follow at once (admin)",
    "requestBody": request_body({"type": "object", "properties": {
        "wake": {"type": "string", "enum": ["probe", "notify"]}},
        "required": ["wake"], "additionalProperties": False}),
    "responses": ok(_WAKE)}

# -- applications
APPLICATIONS_LIST = {"summary": "Applications with endpoint counts and queue depth (admin)",
                     "responses": ok({"type": "array", "items": ref("Application")})}
APPLICATIONS_CREATE = {
    "summary": "Create an application (admin; an existing id answers 409)",
    "requestBody": request_body({"type": "object", "properties": {"id": APP, "name": STR},
                          "required": ["id"], "additionalProperties": False}),
    "responses": {**ok(ref("Application"), "201"),
                  "409": {"description": "Exists", "content": {"application/json": {"schema": ref("Error")}}}}}
APPLICATION_UPDATE = {
    "summary": "Rename an application or set its quotas, enforced on this API (admin); "
               "a field left out stays, a quota null is cleared",
    "parameters": [APP_PATH],
    "requestBody": request_body({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200}, **QUOTAS},
        "additionalProperties": False}),
    "responses": ok({"type": "object", "properties": {
        "id": STR, "name": STR, **QUOTAS}})}
APPLICATION_TOKEN = {
    "summary": "A new API token of the application, shown only in this answer (admin)",
    "parameters": [APP_PATH],
    "requestBody": request_body({"type": "object", "properties": {"ttl_s": TTL}, "additionalProperties": False}, False),
    "responses": ok({"type": "object", "properties": {
        "app": STR, "token": STR, "expires_at": TS}}, "201")}
APPLICATION_PORTAL_LINK = {
    "summary": "A one-time sign-in link to the application's portal (admin); base_url "
               "defaults to this server's address as the caller reached it",
    "parameters": [APP_PATH],
    "requestBody": request_body({"type": "object", "properties": {
        "base_url": {"type": "string", "format": "uri"},
        "ttl_s": {"type": "number", "minimum": 1, "maximum": 604800, "default": 3600}},
        "additionalProperties": False}, False),
    "responses": ok({"type": "object", "properties": {
        "url": STR, "code": STR, "expires_at": TS}}, "201")}
APPLICATION_REVOKE_PORTAL = {
    "summary": "End every portal code and session of the application at once (admin); "
               "the counts are of those still live",
    "parameters": [APP_PATH],
    "responses": ok({"type": "object", "properties": {
        "app": STR, "codes": INT, "sessions": INT}})}

# -- the portal
PORTAL_LOGIN = {
    "summary": "Exchange a one-time code for a portal session cookie; 303 to /portal",
    "parameters": [{"name": "code", "in": "query", "required": True, "schema": STR}],
    "responses": {"303": {"description": "signed in"}, "401": {"description": "code unknown, used or expired"}}}

# fmt: on


# Postback tooling (web/postbacks.py).
# fmt: off
ENDPOINT_SEND_TEST = {
    "summary": "Send one request to this endpoint now, outside the queue (signed and shaped "
               "as a delivery); answers the receiver's status, latency and first 2 KiB of body. "
               "Nothing is stored",
    "parameters": _ONE,
    "requestBody": request_body({"type": "object", "properties": {
        "payload": {}, "event_type": {"type": "string", "minLength": 1, "maxLength": 200},
        "app": APP}, "additionalProperties": False}, False),
    "responses": ok({"type": "object", "properties": {
        "endpoint_id": INT, "event_id": STR, "sent": {"type": "boolean"},
        "delivered": {"type": "boolean"}, "method": STR, "url": {**STR, "nullable": True},
        "status_code": {**INT, "nullable": True}, "latency_ms": INT,
        "error": {**STR, "nullable": True}, "body": STR,
        "body_truncated": {"type": "boolean"}}})}
_EVENT_PATH = [{"name": "event_id", "in": "path", "required": True, "schema": STR}, APP_QUERY]
_EVENT_APP = request_body({"type": "object", "properties": {"app": APP},
                    "additionalProperties": False}, False)
EVENT_RELEASE = {
    "summary": "Send an event's held deliveries (held → pending)", "parameters": _EVENT_PATH,
    "requestBody": _EVENT_APP,
    "responses": ok({"type": "object", "properties": {
        "event_id": STR, "released": {"type": "array", "items": INT}}})}
EVENT_CANCEL = {
    "summary": "End an event's deliveries not yet sent (held, pending, awaiting a retry)",
    "parameters": _EVENT_PATH, "requestBody": _EVENT_APP,
    "responses": ok({"type": "object", "properties": {
        "event_id": STR, "cancelled": {"type": "array", "items": INT}}})}

# Erasure (web/erasure.py).
_EXPUNGED = ok({"type": "object", "properties": {"expunged": {**INT, "minimum": 0}},
                "required": ["expunged"]})
_CONTAINS = {"type": "object", "minProperties": 1, "maxProperties": 16,
             "description": "top-level payload fields and the JSON values they must equal"}
EVENT_EXPUNGE = {
    "summary": "Erase an event's payload (its deliveries' and its message's) now; what is still "
               "to be sent is cancelled; the rows stay, with payload_expired",
    "parameters": _EVENT_PATH, "responses": _EXPUNGED}
APPLICATION_EXPUNGE = {
    "summary": "Erase the application's payloads (enqueued before `before`, matching "
               "`payload_contains`)",
    "parameters": [{"name": "app", "in": "path", "required": True, "schema": APP}],
    "requestBody": request_body({"type": "object", "properties": {
        "before": {"type": "string", "format": "date-time"}, "payload_contains": _CONTAINS},
        "additionalProperties": False}, False),
    "responses": _EXPUNGED}
EXPUNGE = {
    "summary": "Erase every payload whose top-level fields equal payload_contains (a person's "
               "data): the admin's in every application (or `app`), an application's in its own",
    "requestBody": request_body({"type": "object", "properties": {
        "payload_contains": _CONTAINS, "app": APP, "before": {"type": "string", "format": "date-time"}},
        "required": ["payload_contains"], "additionalProperties": False}),
    "responses": _EXPUNGED}
# fmt: on


def document(table: Iterable[Route]) -> dict[str, Any]:
    """The document, its paths made from the route table's rows that have an operation."""
    paths: dict[str, dict[str, Any]] = {}
    for row in table:
        if row.operation is None:
            continue
        item = paths.setdefault(row.canonical, {})
        method = row.method.lower()
        if method in item:
            raise ValueError(f"{row.method} {row.canonical} is in the table twice")
        operation = dict(row.operation)
        if row.access is Access.OPEN:
            operation["security"] = []
        item[method] = operation
    return {**DOCUMENT, "paths": paths}
