"""The one JSON encoding of every document the CLI prints and the admin API
answers: orjson, datetimes as ISO-8601, numeric columns as floats."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson


def to_json(doc: Any) -> bytes:
    """The one JSON encoding of every document the CLI prints and the admin
    API answers (orjson; datetimes as ISO-8601, numeric columns as floats)."""
    return orjson.dumps(doc, default=_decimal)


def _decimal(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError
