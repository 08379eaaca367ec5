"""An endpoints row's settings columns as values: what both data-access
modules read (store for the worker, catalog for the entry points), so that
neither imports the other."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from dispatcher.core.models import SETTING_NAMES
from dispatcher.core.secretbox import SecretBox, seal, unseal


def settings_from_row(row: asyncpg.Record) -> dict[str, Any]:
    """The EndpointSettings fields of an endpoints row, header values as
    stored (sealed when DISPATCHER_SECRET_KEY is set: see unseal_headers)."""
    out = {k: row[k] for k in SETTING_NAMES}
    out["event_types"] = tuple(row["event_types"])
    out["headers"] = tuple(orjson.loads(row["headers"]).items()) if row["headers"] else ()
    return out


Headers = tuple[tuple[str, str], ...]


def seal_headers(box: SecretBox | None, headers: Headers) -> Headers:
    """Header values as stored: custom headers often carry a receiver's
    credentials, so they are encrypted like secrets (names stay readable)."""
    return tuple((name, seal(box, value)) for name, value in headers)


def unseal_headers(box: SecretBox | None, headers: Headers) -> Headers:
    """The values to send, from the stored ones (plain values, written before
    a key was set, pass as they are). Raises OperationalError when a value is
    sealed and `box` is None or holds another key."""
    return tuple((name, unseal(box, value)) for name, value in headers)
