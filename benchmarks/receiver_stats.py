"""The benchmark receiver's counters and canned responses (receiver.py
answers the POSTs; this module counts them and renders `GET /stats`)."""

from __future__ import annotations

import http
import time

MAX_TRACKED_IDS = 10_000_000
MAX_TRACKED_PATHS = 100_000
OTHER_PATHS = b"(other)"


def status_line(status: int) -> bytes:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Status"
    return f"HTTP/1.1 {status} {reason}\r\n".encode()


def response(
    status: int, body: bytes = b"", *, close: bool = False, ctype: str = "", extra: bytes = b""
) -> bytes:
    """One whole HTTP/1.1 response; `extra`: more header lines, CRLF-ended."""
    head = status_line(status) + b"content-length: " + str(len(body)).encode() + b"\r\n" + extra
    if ctype:
        head += b"content-type: " + ctype.encode() + b"\r\n"
    if close:
        head += b"connection: close\r\n"
    return head + b"\r\n" + body


class Stats:
    __slots__ = (
        "answers",
        "arrivals",
        "count",
        "first_ts",
        "ids",
        "last_ts",
        "max_arrivals",
        "max_open",
        "open",
        "other",
        "paths",
        "peers",
        "started",
        "untracked",
    )

    def __init__(self, max_arrivals: int = 0) -> None:
        self.count = 0
        self.ids: set[bytes] = set()
        self.untracked = 0  # POSTs whose id was not tracked (no header, or the set is full)
        self.other = 0  # non-POST requests other than /stats
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.started = time.time()
        # path -> [count, duplicates, first_ts, last_ts]
        self.paths: dict[bytes, list[float]] = {}
        self.open = 0  # POSTs received, response not sent yet
        self.max_open = 0
        self.max_arrivals = max_arrivals
        self.arrivals: dict[str, float] = {}
        self.answers: dict[str, int] = {}  # POSTs per kind of answer (ok, 429, hang, ...)
        self.peers: dict[str, int] = {}  # POSTs per client address (bounded like paths)

    def post(self, webhook_id: bytes | None, path: bytes, now: float, peer: str = "?") -> None:
        if peer in self.peers or len(self.peers) < MAX_TRACKED_PATHS:
            self.peers[peer] = self.peers.get(peer, 0) + 1
        if self.first_ts is None:
            self.first_ts = now
        self.last_ts = now
        self.count += 1
        dup = 0
        if webhook_id is None or (len(self.ids) >= MAX_TRACKED_IDS and webhook_id not in self.ids):
            self.untracked += 1
        elif webhook_id in self.ids:
            dup = 1
        else:
            self.ids.add(webhook_id)
            if len(self.arrivals) < self.max_arrivals:
                self.arrivals[webhook_id.decode(errors="replace")] = now
        p = self.paths.get(path)
        if p is None:
            if len(self.paths) >= MAX_TRACKED_PATHS:
                path = OTHER_PATHS
                p = self.paths.get(path)
            if p is None:
                p = self.paths[path] = [0, 0, now, now]
        p[0] += 1
        p[1] += dup
        p[3] = now
        self.open += 1
        if self.open > self.max_open:
            self.max_open = self.open

    def doc(self, connections: int, *, paths: bool = False) -> dict[str, object]:
        unique = len(self.ids)
        tracked = self.count - self.untracked
        out: dict[str, object] = {
            "count": self.count,
            "unique_ids": unique,
            "duplicates": tracked - unique,
            "untracked": self.untracked,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "other_requests": self.other,
            "connections": connections,
            "open": self.open,
            "max_open": self.max_open,
            "uptime_s": round(time.time() - self.started, 3),
            "answers": dict(self.answers),
            "peers": dict(self.peers),
        }
        if paths:
            out["paths"] = {
                k.decode(errors="replace"): {
                    "count": int(v[0]),
                    "duplicates": int(v[1]),
                    "first_ts": v[2],
                    "last_ts": v[3],
                }
                for k, v in self.paths.items()
            }
        return out
