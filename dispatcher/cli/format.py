"""Plain-text tables for people (JSON for machines is core.encoding)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any


def print_table(rows: list[dict[str, Any]], cols: Sequence[str]) -> None:
    if not rows:
        print("(none)")
        return
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}"
    if isinstance(v, datetime):
        return v.isoformat(timespec="seconds")
    if isinstance(v, list | tuple):
        return ",".join(str(x) for x in v)
    return str(v)
