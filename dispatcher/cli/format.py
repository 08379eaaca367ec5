"""Plain-text tables for people (JSON for machines is core.encoding)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

# What a terminal shows without wrapping, give or take; rows that would be
# wider put their long text on lines of their own.
WIDTH = 100


def print_table(
    rows: list[dict[str, Any]],
    cols: Sequence[str],
    *,
    headers: Mapping[str, str] | None = None,
    cap: Mapping[str, int] | None = None,
    after: str | None = None,
) -> None:
    """`headers` renames columns, `cap` cuts a column's cells to so many
    characters, and `after` names a field printed under its row, wrapped to
    WIDTH (a long suggestion that would otherwise widen every row)."""
    if not rows:
        print("(none)")
        return
    names = [(headers or {}).get(c, c) for c in cols]
    cells = [[_cut(_cell(r.get(c)), (cap or {}).get(c)) for c in cols] for r in rows]
    widths = [max(len(n), *(len(row[i]) for row in cells)) for i, n in enumerate(names)]
    print(_line(names, widths))
    for r, row in zip(rows, cells, strict=True):
        print(_line(row, widths))
        if after is not None and r.get(after):
            for text in wrap(str(r[after]), indent="    "):
                print(text)


def _line(values: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()


def _cut(text: str, cap: int | None) -> str:
    return text if cap is None or len(text) <= cap else text[: cap - 1] + "…"


def plural(n: int, one: str, many: str) -> str:
    """`1 delivery`, `2 deliveries`: counts said as a person would."""
    return f"{n} {one if n == 1 else many}"


def wrap(text: str, *, indent: str = "", width: int = WIDTH) -> list[str]:
    """Words filled to `width`; a `command in backticks` is never split, so
    it can still be copied whole."""
    words: list[str] = []
    for part in re.split(r"(`[^`]*`)", text):
        words += [part] if part.startswith("`") else part.split()
    lines: list[str] = []
    line = ""
    for word in words:
        if line and len(indent) + len(line) + 1 + len(word) > width:
            lines.append(indent + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(indent + line)
    return lines


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.1f}"
    if isinstance(v, datetime):
        return v.isoformat(timespec="seconds")
    if isinstance(v, list | tuple):
        return ",".join(str(x) for x in v)
    if isinstance(v, dict):
        return orjson.dumps(v).decode()
    return str(v)
