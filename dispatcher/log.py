"""Structured logs: one JSON object per line on stderr.

Callers pass event names and ids, never payloads; `event()` refuses keys that
name payload-bearing fields so a careless call cannot leak one.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import orjson

_FORBIDDEN = frozenset({"payload", "body", "secret", "secrets", "data"})
REDACTED = "[redacted]"

_logger = logging.getLogger("dispatcher")
_sensitive: frozenset[str] = frozenset()


def _scrub(value: Any) -> Any:
    """Redacts sensitive keys at any depth of a logged structure."""
    if isinstance(value, dict):
        return {
            k: REDACTED if str(k).lower() in _sensitive else _scrub(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            doc.update(_scrub(fields))
        elif record.name != "dispatcher":
            # A library's own warning: one line with where it came from and
            # the exception's one-line summary, never its traceback.
            doc["logger"] = record.name
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                doc["error"] = crash_site(exc)
        return orjson.dumps(doc, default=str).decode()


def crash_site(exc: BaseException) -> str:
    """An unexpected exception as its type and the line that raised it:
    enough to find the bug, and never its message, which may carry a URL
    with macro values, payload fields or bytes a receiver sent."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return type(exc).__name__
    code = tb.tb_frame.f_code
    return f"{type(exc).__name__} at {Path(code.co_filename).name}:{tb.tb_lineno} ({code.co_name})"


def setup(level: str = "info", sensitive_fields: tuple[str, ...] = ()) -> None:
    global _sensitive
    _sensitive = frozenset(f.lower() for f in sensitive_fields)
    if any(getattr(h, "_dispatcher", False) for h in _logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    handler._dispatcher = True  # type: ignore[attr-defined]
    _logger.addHandler(handler)
    _logger.setLevel(level.upper())
    _logger.propagate = False
    # Libraries (asyncpg, aiohttp, asyncio) log through the root logger;
    # without a handler Python prints their tracebacks raw on stderr.
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    if not _logger.isEnabledFor(level):
        return
    leaked = _FORBIDDEN.intersection(fields)
    if leaked:
        raise ValueError(f"refusing to log payload-bearing fields: {sorted(leaked)}")
    _logger.log(level, name, extra={"fields": fields, "t": time.time()})
