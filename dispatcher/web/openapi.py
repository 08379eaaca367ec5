"""The OpenAPI 3.0 document served at /v1/openapi.json and /openapi.json:
its schemas and one operation object per route; the paths are the route
table's (admin.ROUTES, `document`)."""

# ruff: noqa: E501
# fmt: off

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dispatcher.version import __version__
from dispatcher.web.routes import Access, Route


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _ok(schema: dict[str, Any], code: str = "200") -> dict[str, Any]:
    return {
        code: {"description": "OK", "content": {"application/json": {"schema": schema}}},
        "400": {"description": "Bad input", "content": {"application/json": {"schema": _ref("Error")}}},
        "401": {"description": "Missing or wrong token (an application token: expired or revoked)"},
        "403": {"description": "Outside the application of the credential", "content": {"application/json": {"schema": _ref("Error")}}},
        "404": {"description": "Not found", "content": {"application/json": {"schema": _ref("Error")}}},
        "503": {"description": "Database unavailable"},
    }


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


_ID = {"name": "id", "in": "path", "required": True,
       "schema": {"type": "integer", "minimum": 1, "maximum": 2**62}}
_NUM = {"type": "number"}
_INT = {"type": "integer"}
_STR = {"type": "string"}
_TS = {"type": "string", "format": "date-time", "nullable": True}
_APP = {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$",
        "description": "an application id; an application's credential may name only its own"}
_APP_QUERY = {"name": "app", "in": "query", "schema": _APP}
_APP_PATH = {"name": "app", "in": "path", "required": True, "schema": _APP}
_TTL = {"type": "number", "minimum": 1, "maximum": 315360000}

_ENDPOINT_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "maxLength": 100, "nullable": True,
             "description": "a label for people (lists, the dashboard)"},
    "description": {"type": "string", "maxLength": 1000, "nullable": True},
    "url": {"type": "string", "maxLength": 2048},
    "event_types": {"type": "array", "items": {"type": "string", "minLength": 1}},
    "rate_per_s": {"type": "number", "nullable": True, "exclusiveMinimum": True, "minimum": 0},
    "burst": {"type": "integer", "nullable": True, "minimum": 1},
    "max_in_flight": {"type": "integer", "minimum": 1, "maximum": 10000},
    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 300000},
    "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
    "retry_base_ms": {"type": "integer", "minimum": 0},
    "retry_cap_ms": {"type": "integer", "minimum": 0},
    "failure_threshold": {"type": "integer", "minimum": 1},
    "cooldown_s": {"type": "number", "exclusiveMinimum": True, "minimum": 0},
    "method": {"type": "string", "enum": ["POST", "GET", "PUT"]},
    "body": {"type": "string", "enum": ["json", "form", "none"], "nullable": True,
             "description": "json: the payload bytes; form: its top-level scalar fields, "
                            "urlencoded; none: no body. Unset: json, none for GET"},
    "success_body": {"type": "string", "nullable": True, "maxLength": 1000,
                     "description": "regular expression a 2xx body's first 4 KiB must match"},
    "filter": {"type": "object", "nullable": True,
               "description": "deliver only events whose payload contains this (jsonb @>)"},
    "ordering": {"type": "string", "enum": ["none", "fifo"]},
    "ordering_key": {"type": "string", "nullable": True, "pattern": r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$",
                     "description": "payload field whose value is a FIFO lane"},
    "client_cert": {"type": "string", "nullable": True,
                    "description": "PEM client certificate for mTLS (shown as ••••)"},
    "client_key": {"type": "string", "nullable": True,
                   "description": "PEM private key for mTLS (shown as ••••)"},
    "macro_style": {"type": "string", "enum": ["brace", "hash", "double"],
                    "description": "URL macros as {name}, #name# or {{name}}"},
    "value_map": {"type": "object", "nullable": True,
                  "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
                  "description": "per macro name, value → partner code; \"*\" for the rest"},
    "disable_after": {"type": "integer", "nullable": True, "minimum": 1, "maximum": 1000,
                      "description": "consecutive failed attempts that disable the endpoint "
                                     "(with disable_within_s)"},
    "disable_within_s": {"type": "number", "nullable": True, "minimum": 1, "maximum": 2592000},
}

_QUOTAS: dict[str, Any] = {
    "max_endpoints": {"type": "integer", "minimum": 0, "maximum": 1000000, "nullable": True,
                      "description": "live endpoints it may create over the API (null: no quota)"},
    "max_events_per_s": {"type": "number", "minimum": 0.001, "maximum": 1000000, "nullable": True,
                         "description": "events per second over the API, in bursts of up to "
                                        "max(1, this) (null: no quota)"},
}
_REFUSED = {"content": {"application/json": {"schema": _ref("Error")}}}

_DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "dispatcher admin API", "version": __version__},
    "components": {
        "securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "DISPATCHER_ADMIN_TOKEN (every route), or an application's dtk_ token "
                           "(the endpoint, event, delivery and dead-letter routes, inside that "
                           "application; every other route answers 403)"}},
        "schemas": {
            "Error": {"type": "object", "properties": {"error": _STR}, "required": ["error"]},
            "Endpoint": {
                "type": "object",
                "properties": {"id": _INT, "app": _STR, "enabled": {"type": "boolean"}, **_ENDPOINT_FIELDS},
            },
            "EndpointCreate": {
                "type": "object",
                "properties": {**_ENDPOINT_FIELDS, "secret": _STR, "app": _APP},
                "required": ["url"],
                "additionalProperties": False,
            },
            "EndpointUpdate": {
                "type": "object", "properties": _ENDPOINT_FIELDS, "additionalProperties": False,
            },
            "Event": {
                "type": "object",
                "properties": {
                    "event_type": {"type": "string", "minLength": 1, "maxLength": 200},
                    "payload": {},
                    "event_id": {"type": "string", "minLength": 1, "maxLength": 200},
                    "endpoint": {"type": "integer", "minimum": 1},
                    "app": _APP,
                    "deliver_at": {"type": "string", "format": "date-time",
                                   "description": "not sent before this time"},
                    "delay_s": {"type": "number", "minimum": 0,
                                "description": "not sent before this many seconds from now"},
                    "hold": {"type": "boolean",
                             "description": "held until POST /v1/events/{event_id}/release"},
                },
                "required": ["event_type", "payload"],
            },
            "EventType": {
                "type": "object",
                "properties": {
                    "name": _STR, "app": {"type": "string", "nullable": True,
                                          "description": "null: catalogue-wide"},
                    "description": _STR,
                    "schema": {"type": "object", "nullable": True,
                               "description": "JSON Schema (draft 2020-12) payloads must match"},
                    "schemas": {"type": "object", "nullable": True,
                                "description": "Svix's shape: version (\"1\", …) to schema; "
                                               "the highest version is the one checked"},
                    "example": {"nullable": True, "description": "derived from the schema"},
                    "archived": {"type": "boolean"},
                    "feature_flag": {"type": "string", "nullable": True},
                    "created_at": _TS, "updated_at": _TS,
                },
            },
            "Deleted": {
                "type": "object",
                "properties": {"id": _INT, "url": _STR, "deleted": {"type": "boolean"},
                               "dead_lettered": _INT},
            },
            "Enqueued": {
                "type": "object",
                "properties": {"event_id": _STR, "deliveries": {"type": "array", "items": _INT}},
            },
            "Health": {
                "type": "object",
                "properties": {
                    "pending": _INT, "awaiting_retry": _INT, "in_flight": _INT,
                    "dead_letter": _INT, "delivered_last_hour": _INT, "failed_last_hour": _INT,
                    "oldest_pending": _TS,
                    "avg_delivery_ms_last_hour": {"type": "number", "nullable": True},
                },
            },
            "Application": {
                "type": "object",
                "properties": {"id": _STR, "name": _STR, "created_at": _TS,
                               "endpoints": _INT, "queue_depth": _INT,
                               "max_endpoints": _QUOTAS["max_endpoints"],
                               "max_events_per_s": _QUOTAS["max_events_per_s"]},
            },
            "Replay": {
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    "endpoint_id": {"type": "integer", "minimum": 1},
                    "since": {"type": "string", "format": "date-time"},
                    "until": {"type": "string", "format": "date-time"},
                    "app": _APP,
                },
            },
        },
    },
    "security": [{"bearer": []}],
}

# ---------------------------------------------------------------- operations
# One per row of the route table (admin.ROUTES), which says its method, its
# path and who may call it: a route the guard leaves open gets "security": [].

HEALTHZ = {"summary": "Process alive", "responses": {"200": {"description": "alive"}}}
READYZ = {"summary": "Database reachable and migrated",
          "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}}}
METRICS = {"summary": "Prometheus metrics",
           "responses": {"200": {"description": "text exposition"}, "401": {"description": "token"}}}
OPENAPI_V1 = {"summary": "This document", "responses": _ok({"type": "object"})}
OPENAPI_ROOT = {"summary": "This document (also at /v1/openapi.json)", "responses": _ok({"type": "object"})}

# -- endpoints
_ONE = [_ID, _APP_QUERY]  # every /v1/endpoints/{id} route but activity
ENDPOINTS_LIST = {"summary": "List endpoints (of one application with ?app=)", "parameters": [_APP_QUERY],
                  "responses": _ok({"type": "array", "items": _ref("Endpoint")})}
ENDPOINTS_CREATE = {"summary": "Create an endpoint (the response carries its secret)",
                    "requestBody": _body(_ref("EndpointCreate")),
                    "responses": {**_ok(_ref("Endpoint"), "201"),
                                  "409": {"description": "The application has max_endpoints live endpoints", **_REFUSED}}}
ENDPOINTS_HEALTH = {"summary": "Breaker state, percentiles, attempts and 2xx share "
                               "over the last hour, per endpoint",
                    "parameters": [_APP_QUERY],
                    "responses": _ok({"type": "array", "items": {"type": "object"}})}
ENDPOINT_GET = {"summary": "One endpoint", "parameters": _ONE, "responses": _ok(_ref("Endpoint"))}
ENDPOINT_UPDATE = {"summary": "Update settings", "parameters": _ONE,
                   "requestBody": _body(_ref("EndpointUpdate")), "responses": _ok(_ref("Endpoint"))}
ENDPOINT_DELETE = {
    "summary": "Delete (no longer listed, gets nothing more; dead letters and history stay). "
               "Refused with 409 while it has pending, failed or in-flight deliveries, unless "
               "force (query or body), which first dead-letters them ('endpoint deleted')",
    "parameters": [*_ONE, {"name": "force", "in": "query", "schema": {"type": "boolean"}}],
    "requestBody": _body({"type": "object", "properties": {"force": {"type": "boolean"}, "app": _APP},
                          "additionalProperties": False}, False),
    "responses": {
        **_ok(_ref("Deleted")),
        "409": {"description": "Has queued deliveries", "content": {"application/json": {"schema": _ref("Error")}}},
    },
}
ENDPOINT_DISABLE = {"summary": "Stop deliveries (nothing queued is lost)", "parameters": _ONE,
                    "responses": _ok(_ref("Endpoint"))}
ENDPOINT_ENABLE = {"summary": "Resume deliveries", "parameters": _ONE, "responses": _ok(_ref("Endpoint"))}
ENDPOINT_ROTATE = {
    "summary": "New secret; the old one signs alongside it for grace_s", "parameters": _ONE,
    "requestBody": _body({"type": "object", "properties": {"grace_s": {"type": "number", "minimum": 0}, "app": _APP}}, False),
    "responses": _ok(_ref("Endpoint"))}
ENDPOINT_TEST = {
    "summary": "Enqueue one dispatcher.test event to this endpoint only", "parameters": _ONE,
    "requestBody": _body({"type": "object", "properties": {"app": _APP}, "additionalProperties": False}, False),
    "responses": _ok(_ref("Enqueued"), "202")}
ENDPOINT_ACTIVITY = {
    "summary": "One endpoint over the last minutes: p50/p95/p99, attempts and failures per "
               "bucket (oldest first), its newest breaker transitions and failed attempts",
    "parameters": [_ID, {"name": "minutes", "in": "query", "schema": {"type": "number", "minimum": 1, "maximum": 1440}}],
    "responses": _ok({"type": "object", "properties": {
        "bucket_s": _NUM,
        "latency": {"type": "array", "items": {"type": "object", "properties": {
            "ago": _INT, "p50_ms": {"type": "number", "nullable": True},
            "p95_ms": {"type": "number", "nullable": True},
            "p99_ms": {"type": "number", "nullable": True},
            "attempts": _INT, "failures": _INT}}},
        "transitions": {"type": "array", "items": {"type": "object", "properties": {
            "from_state": _STR, "to_state": _STR, "cooldown_seconds": {"type": "number", "nullable": True},
            "at": _TS}}},
        "failures": {"type": "array", "items": {"type": "object", "properties": {
            "delivery_id": {"type": "integer", "nullable": True},
            "event_id": {"type": "string", "nullable": True},
            "event_type": {"type": "string", "nullable": True}, "at": _TS,
            "status_code": {"type": "integer", "nullable": True}, "response_ms": _INT,
            "error": {"type": "string", "nullable": True}}}},
    }})}

# -- event types
_UNPROCESSABLE = {"description": "Refused by its event type (archived, or the payload fails "
                                 "its schema: the error names the path); nothing queued", **_REFUSED}
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
    "parameters": [_APP_QUERY,
                   {"name": "include_archived", "in": "query", "schema": {"type": "boolean"}},
                   {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                   {"name": "after", "in": "query", "schema": _STR,
                    "description": "the last name of the previous page"}],
    "responses": _ok({"type": "array", "items": _ref("EventType")})}
EVENT_TYPES_CREATE = {
    "summary": "Add an event type (catalogue-wide, or with app an application's own); a name "
               "taken in that scope answers 409",
    "requestBody": _body({"type": "object", "properties": {
        "name": _TYPE_NAME["schema"], **_TYPE_FIELDS, "app": _APP},
        "required": ["name"], "additionalProperties": False}),
    "responses": {**_ok(_ref("EventType"), "201"),
                  "409": {"description": "Exists", **_REFUSED}}}
EVENT_TYPE_GET = {"summary": "One event type (an application's own first, else catalogue-wide)",
                  "parameters": [_TYPE_NAME, _APP_QUERY], "responses": _ok(_ref("EventType"))}
EVENT_TYPE_UPDATE = {
    "summary": "Change description, schema, archived or feature_flag (an application may not "
               "change a catalogue-wide type: 403)",
    "parameters": [_TYPE_NAME, _APP_QUERY],
    "requestBody": _body({"type": "object", "properties": {
        **_TYPE_FIELDS, "archived": {"type": "boolean"}, "app": _APP},
        "additionalProperties": False}),
    "responses": _ok(_ref("EventType"))}
EVENT_TYPE_DELETE = {
    "summary": "Archive it (it accepts no new events); ?expunge=true removes it",
    "parameters": [_TYPE_NAME, _APP_QUERY,
                   {"name": "expunge", "in": "query", "schema": {"type": "boolean"}}],
    "requestBody": _body({"type": "object", "properties": {"app": _APP},
                          "additionalProperties": False}, False),
    "responses": _ok(_ref("EventType"))}

# -- events, deliveries, dead letters
EVENTS_CREATE = {"summary": "Enqueue an event (fan-out to subscribers)",
                 "requestBody": _body(_ref("Event")),
                 "responses": {**_ok(_ref("Enqueued"), "202"), "422": _UNPROCESSABLE,
                               "429": {"description": "Over the application's max_events_per_s; nothing "
                                                      "queued; try again after Retry-After seconds",
                                       "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
                                       **_REFUSED}}}
_DELIVERY_FIELDS: dict[str, Any] = {
    "id": _INT, "endpoint_id": _INT, "app": _STR, "event_id": _STR, "event_type": _STR,
    "status": {"type": "string", "enum": ["pending", "in_flight", "delivered", "failed", "dead_letter"]},
    "attempt_count": _INT, "max_attempts": _INT, "created_at": _TS, "next_attempt_at": _TS,
    "delivered_at": _TS, "updated_at": _TS, "last_error": {"type": "string", "nullable": True},
    "last_status_code": {"type": "integer", "nullable": True},
    "last_response_ms": {"type": "integer", "nullable": True},
}
_ATTEMPT = {"type": "object", "properties": {
    "at": _TS, "status_code": {"type": "integer", "nullable": True}, "response_ms": _INT,
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
        _CURSOR_QUERY, _LIMIT_QUERY, _APP_QUERY,
    ],
    "responses": _ok({"type": "object", "properties": {
        "deliveries": {"type": "array", "items": {"type": "object", "properties": {
            **_DELIVERY_FIELDS, "attempts": {"type": "array", "items": _ATTEMPT}}}},
        "next_cursor": {"type": "string", "nullable": True}}})}
DELIVERY_GET = {
    "summary": "One delivery with its payload (as enqueued) and its attempts, oldest first",
    "parameters": [_ID, _APP_QUERY],
    "responses": _ok({"type": "object", "properties": {
        **_DELIVERY_FIELDS, "payload": {}, "attempts": {"type": "array", "items": _ATTEMPT}}})}
DEAD_LETTERS = {
    "summary": "Dead letters, newest first; the next page's ?cursor= in the X-Next-Cursor "
               "header (absent on the last page)",
    "parameters": [_ENDPOINT_QUERY, _LIMIT_QUERY, _CURSOR_QUERY, _APP_QUERY],
    "responses": {**_ok({"type": "array", "items": {"type": "object"}}),
                  "200": {"description": "OK", "headers": {"X-Next-Cursor": {"schema": _STR}},
                          "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}}}}}
DEAD_LETTERS_ANALYZE = {
    "summary": "Per endpoint: count, primary error and status, pattern, suggested action",
    "parameters": [{"name": "hours", "in": "query", "schema": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 8760}}],
    "responses": _ok({"type": "array", "items": {"type": "object"}})}
DEAD_LETTERS_REPLAY = {
    "summary": "Move dead letters back to pending with a fresh attempt budget: ids, an "
               "endpoint's (since, until), or without an endpoint every one (of the "
               "application) that died since a time",
    "requestBody": _body(_ref("Replay")),
    "responses": _ok({"type": "object", "properties": {"requeued": _INT}})}

# -- operational webhooks
_OPS_TYPES = {"type": "array", "items": {"type": "string", "enum": [
    "endpoint.created", "endpoint.updated", "endpoint.deleted", "endpoint.disabled",
    "endpoint.enabled", "message.attempt.exhausted", "message.attempt.failing",
    "message.attempt.recovered"]}, "description": "empty or left out: every type"}
_OPS_WEBHOOK = {"type": "object", "properties": {
    "id": _INT, "url": _STR, "event_types": _OPS_TYPES,
    "app": {**_APP, "nullable": True, "description": "null: the operator's, told about every application"},
    "description": {"type": "string", "nullable": True}, "disabled": {"type": "boolean"},
    "disabled_reason": {"type": "string", "nullable": True},
    "secret": {"type": "string", "description": "in the answer to its creation only"},
    "created_at": _TS, "updated_at": _TS}}
OPS_WEBHOOKS_LIST = {
    "summary": "Operational webhooks: every one (admin), or one application's (?app=, or its credential)",
    "parameters": [_APP_QUERY], "responses": _ok({"type": "array", "items": _OPS_WEBHOOK})}
OPS_WEBHOOKS_CREATE = {
    "summary": "Create an operational webhook: the operator's without app (admin), else that "
               "application's; the answer carries its secret",
    "requestBody": _body({"type": "object", "properties": {
        "url": _STR, "event_types": _OPS_TYPES, "app": _APP,
        "secret": {"type": "string", "pattern": "^whsec_"}, "description": _STR},
        "required": ["url"], "additionalProperties": False}),
    "responses": _ok(_OPS_WEBHOOK, "201")}
OPS_WEBHOOK_GET = {"summary": "One operational webhook", "parameters": [_ID, _APP_QUERY],
                   "responses": _ok(_OPS_WEBHOOK)}
OPS_WEBHOOK_UPDATE = {
    "summary": "Change an operational webhook's url, event types, description or disabled",
    "parameters": [_ID, _APP_QUERY],
    "requestBody": _body({"type": "object", "properties": {
        "url": _STR, "event_types": _OPS_TYPES, "description": {"type": "string", "nullable": True},
        "disabled": {"type": "boolean"}, "app": _APP}, "additionalProperties": False}),
    "responses": _ok(_OPS_WEBHOOK)}
OPS_WEBHOOK_DELETE = {
    "summary": "Delete an operational webhook (what it still had queued is dead-lettered)",
    "parameters": [_ID, _APP_QUERY],
    "responses": _ok({"type": "object", "properties": {"id": _INT, "deleted": {"type": "boolean"}}})}

# -- summaries
HEALTH = {"summary": "One-row pipeline summary", "responses": _ok(_ref("Health"))}
TIMELINE = {
    "summary": "Enqueued, delivered and dead per bucket, oldest first, and the queue depth "
               "(pending + retrying + in flight) at the end of each bucket",
    "parameters": [{"name": "minutes", "in": "query", "schema": {"type": "number", "minimum": 1, "maximum": 1440}}],
    "responses": _ok({"type": "object"})}
ALERTS = {"summary": "The three alert conditions", "responses": _ok({"type": "object"})}

# -- the wake-up switch (schema 016)
_WAKE = {"type": "object", "properties": {
    "wake": {"type": "string", "enum": ["probe", "notify"]}, "updated_at": _TS}}
WAKE_GET = {"summary": "How idle workers learn of new rows: probe or notify (admin)",
            "responses": _ok(_WAKE)}
WAKE_PUT = {
    "summary": "Set the wake-up switch; running workers follow at once (admin)",
    "requestBody": _body({"type": "object", "properties": {
        "wake": {"type": "string", "enum": ["probe", "notify"]}},
        "required": ["wake"], "additionalProperties": False}),
    "responses": _ok(_WAKE)}

# -- applications
APPLICATIONS_LIST = {"summary": "Applications with endpoint counts and queue depth (admin)",
                     "responses": _ok({"type": "array", "items": _ref("Application")})}
APPLICATIONS_CREATE = {
    "summary": "Create an application (admin; an existing id answers 409)",
    "requestBody": _body({"type": "object", "properties": {"id": _APP, "name": _STR},
                          "required": ["id"], "additionalProperties": False}),
    "responses": {**_ok(_ref("Application"), "201"),
                  "409": {"description": "Exists", "content": {"application/json": {"schema": _ref("Error")}}}}}
APPLICATION_UPDATE = {
    "summary": "Rename an application or set its quotas, enforced on this API (admin); "
               "a field left out stays, a quota null is cleared",
    "parameters": [_APP_PATH],
    "requestBody": _body({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200}, **_QUOTAS},
        "additionalProperties": False}),
    "responses": _ok({"type": "object", "properties": {
        "id": _STR, "name": _STR, **_QUOTAS}})}
APPLICATION_TOKEN = {
    "summary": "A new API token of the application, shown only in this answer (admin)",
    "parameters": [_APP_PATH],
    "requestBody": _body({"type": "object", "properties": {"ttl_s": _TTL}, "additionalProperties": False}, False),
    "responses": _ok({"type": "object", "properties": {
        "app": _STR, "token": _STR, "expires_at": _TS}}, "201")}
APPLICATION_PORTAL_LINK = {
    "summary": "A one-time sign-in link to the application's portal (admin); base_url "
               "defaults to this server's address as the caller reached it",
    "parameters": [_APP_PATH],
    "requestBody": _body({"type": "object", "properties": {
        "base_url": {"type": "string", "format": "uri"},
        "ttl_s": {"type": "number", "minimum": 1, "maximum": 604800, "default": 3600}},
        "additionalProperties": False}, False),
    "responses": _ok({"type": "object", "properties": {
        "url": _STR, "code": _STR, "expires_at": _TS}}, "201")}
APPLICATION_REVOKE_PORTAL = {
    "summary": "End every portal code and session of the application at once (admin); "
               "the counts are of those still live",
    "parameters": [_APP_PATH],
    "responses": _ok({"type": "object", "properties": {
        "app": _STR, "codes": _INT, "sessions": _INT}})}

# -- the portal
PORTAL_LOGIN = {
    "summary": "Exchange a one-time code for a portal session cookie; 303 to /portal",
    "parameters": [{"name": "code", "in": "query", "required": True, "schema": _STR}],
    "responses": {"303": {"description": "signed in"}, "401": {"description": "code unknown, used or expired"}}}

# fmt: on


# Postback tooling (web/postbacks.py).
# fmt: off
ENDPOINT_SEND_TEST = {
    "summary": "Send one request to this endpoint now, outside the queue (signed and shaped "
               "as a delivery); answers the receiver's status, latency and first 2 KiB of body. "
               "Nothing is stored",
    "parameters": _ONE,
    "requestBody": _body({"type": "object", "properties": {
        "payload": {}, "event_type": {"type": "string", "minLength": 1, "maxLength": 200},
        "app": _APP}, "additionalProperties": False}, False),
    "responses": _ok({"type": "object", "properties": {
        "endpoint_id": _INT, "event_id": _STR, "sent": {"type": "boolean"},
        "delivered": {"type": "boolean"}, "method": _STR, "url": {**_STR, "nullable": True},
        "status_code": {**_INT, "nullable": True}, "latency_ms": _INT,
        "error": {**_STR, "nullable": True}, "body": _STR,
        "body_truncated": {"type": "boolean"}}})}
_EVENT_PATH = [{"name": "event_id", "in": "path", "required": True, "schema": _STR}, _APP_QUERY]
_EVENT_APP = _body({"type": "object", "properties": {"app": _APP},
                    "additionalProperties": False}, False)
EVENT_RELEASE = {
    "summary": "Send an event's held deliveries (held → pending)", "parameters": _EVENT_PATH,
    "requestBody": _EVENT_APP,
    "responses": _ok({"type": "object", "properties": {
        "event_id": _STR, "released": {"type": "array", "items": _INT}}})}
EVENT_CANCEL = {
    "summary": "End an event's deliveries not yet sent (held, pending, awaiting a retry)",
    "parameters": _EVENT_PATH, "requestBody": _EVENT_APP,
    "responses": _ok({"type": "object", "properties": {
        "event_id": _STR, "cancelled": {"type": "array", "items": _INT}}})}
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
    return {**_DOCUMENT, "paths": paths}
