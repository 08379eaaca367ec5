"""What the harness tells a reader: progress lines on stderr, number
formatting, target verdicts and the result table of a report.

Standard library only; never measures anything itself.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

_tty = sys.stderr.isatty()


def progress(msg: str, *, transient: bool = False) -> None:
    """One progress line on stderr (overwritten in place on a terminal)."""
    stamp = time.strftime("%H:%M:%S")
    clear = "\r\x1b[K" if _tty else ""
    end = "" if _tty and transient else "\n"
    sys.stderr.write(f"{clear}[bench {stamp}] {msg}{end}")
    sys.stderr.flush()


def rate_since(last: dict[str, float], count: int, now: float) -> float:
    """Per second since the count and time in `last`, which then hold these."""
    rate = (count - last["count"]) / max(now - last["t"], 1e-6)
    last.update(count=count, t=now)
    return rate


def fmt_int(v: float | None) -> str:
    return "-" if v is None else f"{round(v):,}"


def fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def pct(values: Sequence[float], q: float) -> float | None:
    """The q-quantile of values (nearest rank), None when there are none."""
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


def verdict(name: str, ok: bool | None, detail: str) -> str:
    """One target line; ok None means not judged (a smoke run)."""
    if ok is None:
        return f"target {name}: not judged (smoke run) - {detail}"
    return f"target {name}: {'meets' if ok else 'BELOW'} - {detail}"


def rate_verdict(target: int, dpm: float, smoke: bool, what: str = "") -> str:
    """The deliveries/min target, not judged in a smoke run."""
    return verdict(
        f"{target:,}/min{what}",
        None if smoke else dpm >= target,
        f"{fmt_int(dpm)}/min = {dpm / target:.2f}x",
    )


def render(report: dict[str, Any]) -> str:
    """The table a scenario's report carries, its verdicts and its problems."""
    if report.get("error"):
        return f"dispatcher bench: scenario {report['scenario']}: ERROR {report['error']}"
    rows = report["table"]
    # Two columns (name, value) or more (name, then one per phase).
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(map(len, rows)))]
    head = f"dispatcher bench: scenario {report['scenario']}, {report.get('title', '')}"
    head = head.rstrip(", ")
    lines = [head, "-" * len(head)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    lines.append("")
    lines += report["verdicts"]
    if report["problems"]:
        lines.append("PROBLEMS: " + "; ".join(report["problems"]))
    else:
        lines.append(report.get("correctness", "correctness: ok (nothing lost, no duplicates)"))
    return "\n".join(lines)
