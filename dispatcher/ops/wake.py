"""The wake-up switch as an operation: read it, set it (schema 016).

One function each, shared by `dispatcher wake` and `/v1/settings/wake`;
the document both print is decided here. Which mode suits which
deployment: docs/operations/scaling.md.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dispatcher.core.errors import BadInput
from dispatcher.core.models import WakeMode
from dispatcher.db import Conn, wake

MODES = tuple(m.value for m in WakeMode)


def parse_mode(raw: object) -> WakeMode:
    """A mode a user typed; anything else is one line (exit 2 / 422)."""
    if isinstance(raw, str) and raw in MODES:
        return WakeMode(raw)
    raise BadInput(f"wake must be one of {', '.join(MODES)} (got {raw!r})")


def _doc(mode: WakeMode, at: datetime | None) -> dict[str, Any]:
    return {"wake": mode.value, "updated_at": None if at is None else at.isoformat()}


async def wake_mode(conn: Conn) -> dict[str, Any]:
    return _doc(*await wake.read(conn))


async def set_wake_mode(conn: Conn, raw: object) -> dict[str, Any]:
    """Stores the switch; running workers follow within milliseconds (a
    trigger notifies them), producers' next enqueue obeys it."""
    return _doc(*await wake.write(conn, parse_mode(raw)))
