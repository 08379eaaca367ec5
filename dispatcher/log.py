"""Logs on stderr: one JSON object per line, or one sentence per line for a
person at a terminal.

DISPATCHER_LOG_FORMAT chooses (settings.py): `json`, `text`, or `auto`
(the default): text when stderr is a terminal, JSON otherwise, so that a
supervisor, a container runtime or a test reading the stream gets the
JSON lines it always got. A text line reads like the CLI's other lines
(`dispatcher: warning: …`); the events a person acts on have a sentence of
their own (_SENTENCES), the others show their name and fields.

Callers pass event names and ids, never payloads; `event()` refuses keys that
name payload-bearing fields so a careless call cannot leak one, and both
formats scrub the sensitive ones.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from dispatcher.core.refusals import refusal_warning

FORMATS = ("auto", "json", "text")
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


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.ERROR:
            head = "dispatcher: error: "
        elif record.levelno >= logging.WARNING:
            head = "dispatcher: warning: "
        else:
            head = "dispatcher: "
        name = record.getMessage()
        fields = getattr(record, "fields", None)
        if fields is None and record.name != "dispatcher":
            # As in JSON: where it came from and the exception's type and
            # line, never its traceback or its message.
            words = f"{record.name}: {name}"
            if record.exc_info and record.exc_info[1] is not None:
                words += f" ({crash_site(record.exc_info[1])})"
            return head + words
        doc = _scrub(fields or {})
        sentence = _SENTENCES.get(name)
        if sentence is not None:
            try:
                return head + sentence(doc)
            except (KeyError, TypeError, ValueError):
                pass  # a field missing: the plain form below still says it all
        shown = ", ".join(f"{k}={_plain(v)}" for k, v in doc.items())
        return head + (f"{name} ({shown})" if shown else name)


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _started(f: dict[str, Any]) -> str:
    ends = (
        "it exits when nothing is left to send (--drain); Ctrl-C stops it sooner"
        if f.get("drain")
        else "Ctrl-C stops it (a second Ctrl-C at once)"
    )
    return (
        f"worker {f['worker']} started on the database at {f['database']}, with "
        f"{_n(f['endpoints'], 'endpoint')} ({f['enabled']} enabled); {ends}"
    )


def _stopped(f: dict[str, Any]) -> str:
    return (
        f"worker {f['worker']} stopped: {f['delivered']} delivered, {f['retried']} to retry, "
        f"{_n(f['dead'], 'dead letter')}, {f['released']} released unsent"
    )


def _dead(f: dict[str, Any]) -> str:
    tries = f["attempts"]
    after = f"after {_n(tries, 'attempt')}" if tries else "not sent"
    return (
        f"dead letter: delivery {f['delivery_id']} to endpoint {f['endpoint_id']}, {after}: "
        f"{f['error']} (`dispatcher dlq replay --id {f['delivery_id']}` sends it again)"
    )


def _unshown(f: dict[str, Any]) -> str:
    top = ", ".join(f"endpoint {eid} ({n})" for eid, n in f["endpoints"].items())
    rest = f["endpoint_count"] - len(f["endpoints"])
    if rest > 0:
        top += f" and {_n(rest, 'other endpoint')}"
    return (
        f"and {_n(f['count'], 'more dead letter')} in the last {f['within_s']:g} s, not shown "
        f"one by one: {top} (`dispatcher dlq analyze` says why)"
    )


def _breaker(f: dict[str, Any]) -> str:
    eid, to = f["endpoint_id"], f["to_state"]
    if to == "open":
        wait = f.get("cooldown_s")
        waits = f"waits {wait:g} s" if wait is not None else "waits its cooldown"
        return f"endpoint {eid}: circuit breaker open: it {waits}, then one probe is sent"
    if to == "half_open":
        return f"endpoint {eid}: circuit breaker half-open: one probe is sent"
    return f"endpoint {eid}: circuit breaker closed: its deliveries flow again"


def _timeouts(f: dict[str, Any]) -> str:
    eid, most = f["endpoint_id"], f["max_in_flight"]
    return (
        f"{f['timeouts']} requests to endpoint {eid} timed out at once (within "
        f"{f['within_s']:g} s): the receiver may not take {most} at a time; lower "
        f"max_in_flight (`dispatcher endpoint update {eid} --max-in-flight "
        f"{f['suggested_max_in_flight']}`), or raise timeout_ms (now {f['timeout_ms']}) "
        "if it is only slow"
    )


def _how_it_ended(f: dict[str, Any]) -> str:
    """`code` (and `signal`, when one ended it) of supervise._exit."""
    if "signal" in f:
        return f"was killed by {f['signal']}"
    return f"exited with code {f['code']}"


def _child_died(f: dict[str, Any]) -> str:
    return (
        f"worker process {f['child']} (pid {f['pid']}) {_how_it_ended(f)}: "
        f"restarting it in {f['restart_in_s']:g} s"
    )


def _child_lost(f: dict[str, Any]) -> str:
    return (
        f"worker process {f['child']} (pid {f['pid']}) {_how_it_ended(f)} while "
        "stopping, not as asked: what it held is retried when its lease ends"
    )


_SENTENCES: dict[str, Callable[[dict[str, Any]], str]] = {
    # run --processes N (cli/supervise.py): the parent's own lines.
    "supervisor_started": lambda f: (
        f"running {f['processes']} worker processes (supervisor pid {f['pid']}); "
        "Ctrl-C stops them all"
    ),
    "child_started": lambda f: f"worker process {f['child']} started (pid {f['pid']})",
    "child_died": _child_died,
    "child_lost": _child_lost,
    "supervisor_stopped": lambda f: f"the {f['processes']} worker processes have stopped",
    "engine_started": _started,
    "engine_stopped": _stopped,
    "delivery_dead": _dead,
    "dead_letters_unshown": _unshown,
    "breaker_transition": _breaker,
    "endpoint_timeouts_at_once": _timeouts,
    "endpoint_target_refused": lambda f: refusal_warning(f["endpoint_id"], f["host"]),
}


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


def setup(level: str = "info", sensitive_fields: tuple[str, ...] = (), fmt: str = "auto") -> None:
    """`fmt`: one of FORMATS (`auto`: text when stderr is a terminal)."""
    global _sensitive
    _sensitive = frozenset(f.lower() for f in sensitive_fields)
    if any(getattr(h, "_dispatcher", False) for h in _logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    text = fmt == "text" or (fmt == "auto" and _terminal(sys.stderr))
    handler.setFormatter(_TextFormatter() if text else _JsonFormatter())
    handler._dispatcher = True  # type: ignore[attr-defined]
    _logger.addHandler(handler)
    _logger.setLevel(level.upper())
    _logger.propagate = False
    # Libraries (asyncpg, aiohttp, asyncio) log through the root logger;
    # without a handler Python prints their tracebacks raw on stderr.
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def _terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced, or closed
        return False


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    if not _logger.isEnabledFor(level):
        return
    leaked = _FORBIDDEN.intersection(fields)
    if leaked:
        raise ValueError(f"refusing to log payload-bearing fields: {sorted(leaked)}")
    _logger.log(level, name, extra={"fields": fields, "t": time.time()})
