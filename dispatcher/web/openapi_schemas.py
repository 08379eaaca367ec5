"""The OpenAPI document's shared pieces: the schema and parameter atoms
(STR, TS, APP, APP_QUERY, …), the response and request-body builders
(`ok`, `request_body`, `ref`) and the document around the paths
(`DOCUMENT`: its info, security scheme and component schemas). The
operations, one per route, and the paths made from the route table are
web.openapi's.
"""

# ruff: noqa: E501
# fmt: off

from __future__ import annotations

from typing import Any

from dispatcher.version import __version__


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def ok(schema: dict[str, Any], code: str = "200") -> dict[str, Any]:
    return {
        code: {"description": "OK", "content": {"application/json": {"schema": schema}}},
        "400": {"description": "Bad input", "content": {"application/json": {"schema": ref("Error")}}},
        "401": {"description": "Missing or wrong token (an application token: expired or revoked)"},
        "403": {"description": "Outside the application of the credential", "content": {"application/json": {"schema": ref("Error")}}},
        "404": {"description": "Not found", "content": {"application/json": {"schema": ref("Error")}}},
        "503": {"description": "Database unavailable"},
    }


def request_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


ID = {"name": "id", "in": "path", "required": True,
       "schema": {"type": "integer", "minimum": 1, "maximum": 2**62}}
NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
TS = {"type": "string", "format": "date-time", "nullable": True}
APP = {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$",
        "description": "an application id; an application's credential may name only its own"}
APP_QUERY = {"name": "app", "in": "query", "schema": APP}
APP_PATH = {"name": "app", "in": "path", "required": True, "schema": APP}
TTL = {"type": "number", "minimum": 1, "maximum": 315360000}

_ENDPOINT_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "maxLength": 100, "nullable": True,
             "description": "a label for people (lists, the dashboard)"},
    "description": {"type": "string", "maxLength": 1000, "nullable": True},
    "url": {"type": "string", "maxLength": 2048,
            "description": "http(s)://…, or a broker: amqp(s)://, nats:// or tls://, redis(s)://"
                           " (a password shown as ****; sent back, it keeps the stored one)"},
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

QUOTAS: dict[str, Any] = {
    "max_endpoints": {"type": "integer", "minimum": 0, "maximum": 1000000, "nullable": True,
                      "description": "live endpoints it may create over the API (null: no quota)"},
    "max_events_per_s": {"type": "number", "minimum": 0.001, "maximum": 1000000, "nullable": True,
                         "description": "events per second over the API, in bursts of up to "
                                        "max(1, this) (null: no quota)"},
}
REFUSED = {"content": {"application/json": {"schema": ref("Error")}}}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "dispatcher admin API", "version": __version__},
    "components": {
        "securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "DISPATCHER_ADMIN_TOKEN (every route), or an application's dtk_ token "
                           "(the endpoint, event, delivery and dead-letter routes, inside that "
                           "application; every other route answers 403)"}},
        "schemas": {
            "Error": {"type": "object", "properties": {"error": STR}, "required": ["error"]},
            "Endpoint": {
                "type": "object",
                "properties": {"id": INT, "app": STR, "enabled": {"type": "boolean"},
                               "kind": {"type": "string",
                                        "enum": ["http", "amqp", "nats", "redis"],
                                        "description": "what the url's scheme names"},
                               **_ENDPOINT_FIELDS},
            },
            "EndpointCreate": {
                "type": "object",
                "properties": {**_ENDPOINT_FIELDS, "secret": STR, "app": APP},
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
                    "app": APP,
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
                    "name": STR, "app": {"type": "string", "nullable": True,
                                          "description": "null: catalogue-wide"},
                    "description": STR,
                    "schema": {"type": "object", "nullable": True,
                               "description": "JSON Schema (draft 2020-12) payloads must match"},
                    "schemas": {"type": "object", "nullable": True,
                                "description": "Svix's shape: version (\"1\", …) to schema; "
                                               "the highest version is the one checked"},
                    "example": {"nullable": True, "description": "derived from the schema"},
                    "archived": {"type": "boolean"},
                    "feature_flag": {"type": "string", "nullable": True},
                    "created_at": TS, "updated_at": TS,
                },
            },
            "Deleted": {
                "type": "object",
                "properties": {"id": INT, "url": STR, "deleted": {"type": "boolean"},
                               "dead_lettered": INT},
            },
            "Enqueued": {
                "type": "object",
                "properties": {"event_id": STR, "deliveries": {"type": "array", "items": INT}},
            },
            "Health": {
                "type": "object",
                "properties": {
                    "pending": INT, "awaiting_retry": INT, "in_flight": INT,
                    "dead_letter": INT, "delivered_last_hour": INT, "failed_last_hour": INT,
                    "oldest_pending": TS,
                    "avg_delivery_ms_last_hour": {"type": "number", "nullable": True},
                },
            },
            "Application": {
                "type": "object",
                "properties": {"id": STR, "name": STR, "created_at": TS,
                               "endpoints": INT, "queue_depth": INT,
                               "max_endpoints": QUOTAS["max_endpoints"],
                               "max_events_per_s": QUOTAS["max_events_per_s"]},
            },
            "Replay": {
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    "endpoint_id": {"type": "integer", "minimum": 1},
                    "since": {"type": "string", "format": "date-time"},
                    "until": {"type": "string", "format": "date-time"},
                    "app": APP,
                },
            },
        },
    },
    "security": [{"bearer": []}],
}
