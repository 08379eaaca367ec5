"""A minimal, fast HTTP/1.1 webhook receiver for the benchmarks.

    python -m benchmarks.receiver --port P [--host 127.0.0.1] [--latency-ms N]
                                  [--status 200] [--hang] [--record-arrivals N]
                                  [--fault KIND --fault-share F | --mix KIND=F,...]
                                  [--latency-lognormal P50:P99 | --latency-uniform LO:HI]
                                  [--seed S]
                                  [--tls-cert PEM --tls-key PEM]

Raw asyncio Protocols on uvloop (aiohttp.web would be the bottleneck, not the
dispatcher). Keep-alive, pipelined requests, Content-Length bodies. Every POST
is answered with `--status` and `content-length: 0`; `GET /stats` answers
JSON `{"count", "unique_ids", "duplicates", "first_ts", "last_ts", ...}`
where `count` is POSTs received and `unique_ids` distinct `webhook-id` values;
`open` is POSTs received and not answered yet (`max_open` its peak).
`GET /stats?paths=1` adds per-path counters (`count`, `duplicates`,
`first_ts`, `last_ts`). `--hang` counts POSTs and never answers them (a
hanging endpoint). `--record-arrivals N` keeps, for up to N distinct ids, the
time.time() at which the first bytes of the first POST carrying that id were
read; `GET /arrivals` answers them as JSON `{id: ts}`. `--fault KIND
--fault-share F` misbehaves on a share F of POSTs, drawn at random (seeded):
`reset` drops the connection without an answer, `500` answers 500, `hang`
never answers (the client's timeout ends it), `cut` answers a 200 whose body
stops short of its content-length and drops the connection; `--mix` draws
several kinds (also `5xx` and `429` with Retry-After), and
`--latency-lognormal` or `--latency-uniform` draws each answer's delay (see
receiver_mix.py).
`--tls-cert/--tls-key` serve https instead of http. The counters and canned
responses live in receiver_stats.py.

`peers` counts POSTs per client address (the cluster rig tells its worker
hosts apart by it). It binds 127.0.0.1 unless `--host` names another
address (the cluster rig's receiver host), prints `READY <port>` on stdout once listening
(`--port 0` picks a free port), and is bounded everywhere: header and body
sizes, queued responses per connection, connections, tracked ids, lifetime;
it also exits when its parent process goes away.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import sys
import time
from collections import deque
from pathlib import Path
from typing import cast

from .receiver_mix import (
    RETRY_AFTER_S,
    Behaviour,
    parse_lognormal,
    parse_mix,
    parse_uniform,
    server_tls,
)
from .receiver_stats import Stats, response

HOST = "127.0.0.1"
MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_QUEUED_PER_CONN = 1024  # responses waiting on one connection before reads pause
MAX_CONNECTIONS = 10_000

_NO_LENGTH = -1


class _Pending:
    """One response, in request order; data is None until its delay passed."""

    __slots__ = ("close", "data")

    def __init__(self, data: bytes | None, close: bool) -> None:
        self.data = data
        self.close = close


class Server:
    """Shared state of all connections."""

    def __init__(
        self,
        status: int,
        behaviour: Behaviour,
        *,
        hang: bool = False,
        max_arrivals: int = 0,
    ) -> None:
        self.stats = Stats(max_arrivals)
        self.behaviour = behaviour
        self.hang = hang
        self.ok = response(status)
        self.ok_close = response(status, close=True)
        retry = f"retry-after: {RETRY_AFTER_S}\r\n".encode()
        self.answers: dict[tuple[str, bool], bytes] = {
            (kind, close): response(code, close=close, extra=retry if code == 429 else b"")
            for kind, code in (("500", 500), ("502", 502), ("504", 504), ("429", 429))
            for close in (False, True)
        }
        self.connections: set[ReceiverProtocol] = set()
        self.accepted = 0

    def answer(self, kind: str | None, close: bool) -> tuple[str, bytes]:
        """The answer to a POST that gets one: (what it is, its bytes)."""
        if kind is None:
            return "ok", self.ok_close if close else self.ok
        if kind == "5xx":
            kind = str(self.behaviour.error_status())
        return kind, self.answers[(kind, close)]


class ReceiverProtocol(asyncio.Protocol):
    __slots__ = (
        "buf",
        "closing",
        "loop",
        "now",
        "paused_read",
        "paused_write",
        "peer",
        "queue",
        "req",
        "server",
        "transport",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        # Headers parsed, body not complete yet: (method, path, length, id, close).
        self.req: tuple[bytes, bytes, int, bytes | None, bool] | None = None
        self.queue: deque[_Pending] = deque()
        self.closing = False
        self.paused_read = False
        self.paused_write = False
        self.now = 0.0
        self.peer = "?"

    # -------------------------------------------------------- connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; same interface.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        if len(self.server.connections) >= MAX_CONNECTIONS:
            transport.write(response(503, close=True))
            transport.close()
            self.closing = True
            return
        self.server.connections.add(self)
        self.server.accepted += 1
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "?"

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closing = True
        self._drop_queue()
        self.transport = None

    def _drop_queue(self) -> None:
        """Forgets queued responses; a hanging server's never become ready, so
        they stop counting as open here (a delayed one's _ready still runs)."""
        if self.server.hang:
            self.server.stats.open -= sum(1 for q in self.queue if q.data is None)
        self.queue.clear()

    def pause_writing(self) -> None:
        self.paused_write = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.paused_write = False
        self._update_reading()

    def _update_reading(self) -> None:
        t = self.transport
        if t is None or self.closing:
            return
        want_pause = self.paused_write or len(self.queue) >= MAX_QUEUED_PER_CONN
        if want_pause and not self.paused_read:
            t.pause_reading()
            self.paused_read = True
        elif not want_pause and self.paused_read:
            t.resume_reading()
            self.paused_read = False

    # -------------------------------------------------------- parsing

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.now = time.time()  # when these bytes arrived (first byte of a request)
        buf = self.buf
        buf += data
        pos = 0
        n = len(buf)
        while not self.closing:
            if self.req is None:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > MAX_HEADER_BYTES:
                        self._fail(431)
                    break
                if end - pos > MAX_HEADER_BYTES:
                    self._fail(431)
                    break
                req = self._parse_head(bytes(buf[pos:end]))
                pos = end + 4
                if req is None:
                    break  # _parse_head answered and is closing
                self.req = req
            method, path, length, wid, close = self.req
            if n - pos < length:
                break
            pos += length
            self.req = None
            self._handle(method, path, wid, close)
        if pos:
            del buf[:pos]
        self._flush()
        self._update_reading()

    def _parse_head(self, head: bytes) -> tuple[bytes, bytes, int, bytes | None, bool] | None:
        lines = head.split(b"\r\n")
        # Tolerate stray CRLFs between requests (RFC 9112 §2.2).
        while lines and not lines[0]:
            lines.pop(0)
        parts = lines[0].split(b" ") if lines else []
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self._fail(400)
            return None
        method, path, version = parts
        length = _NO_LENGTH
        wid: bytes | None = None
        close = version == b"HTTP/1.0"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                self._fail(400)
                return None
            name = name.strip().lower()
            if name == b"content-length":
                value = value.strip()
                if not value.isdigit() or (length != _NO_LENGTH and int(value) != length):
                    self._fail(400)
                    return None
                length = int(value)
            elif name == b"webhook-id":
                wid = value.strip()
            elif name == b"connection":
                token = value.strip().lower()
                if token == b"close":
                    close = True
                elif token == b"keep-alive":
                    close = False
            elif name == b"transfer-encoding":
                # Not needed by any client here; refuse rather than mis-frame.
                self._fail(501)
                return None
        if length > MAX_BODY_BYTES:
            self._fail(413)
            return None
        return method, path, max(length, 0), wid, close

    # -------------------------------------------------------- answering

    def _handle(self, method: bytes, path: bytes, wid: bytes | None, close: bool) -> None:
        server = self.server
        if method == b"POST":
            server.stats.post(wid, path.split(b"?", 1)[0], self.now, self.peer)
            fault = server.behaviour.fault()
            if fault in ("reset", "cut", "hang"):
                self._misbehave(fault, close)
                return
            what, payload = server.answer(fault, close)
            answers = server.stats.answers
            answers[what] = answers.get(what, 0) + 1
            delay = server.behaviour.delay()
            if server.hang:
                # Never answered: the slot stays empty, so this connection
                # answers nothing more (the client's timeout ends it).
                self.queue.append(_Pending(None, close))
            elif delay > 0:
                slot = _Pending(None, close)
                self.queue.append(slot)
                self.loop.call_later(delay, self._ready, slot, payload)
            else:
                server.stats.open -= 1
                self.queue.append(_Pending(payload, close))
            return
        route, _, query = path.partition(b"?")
        if method == b"GET" and route == b"/stats":
            doc = server.stats.doc(len(server.connections), paths=b"paths=1" in query)
            doc["connections_total"] = server.accepted
            body = json.dumps(doc).encode()
            resp = response(200, body, close=close, ctype="application/json")
        elif method == b"GET" and route == b"/arrivals":
            body = json.dumps(server.stats.arrivals).encode()
            resp = response(200, body, close=close, ctype="application/json")
        else:
            server.stats.other += 1
            resp = response(404 if method == b"GET" else 405, close=close)
        self.queue.append(_Pending(resp, close))

    def _misbehave(self, fault: str, close: bool) -> None:
        """No answer, or a broken one (the client never pipelines, so nothing
        queued before it is lost)."""
        stats = self.server.stats
        stats.open -= 1
        stats.answers[fault] = stats.answers.get(fault, 0) + 1
        t = self.transport
        if fault == "hang":
            self.queue.append(_Pending(None, close))
        elif t is not None:
            if fault == "cut":
                t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\ncut short")
                t.close()
            else:  # reset
                t.abort()
            self.closing = True
            self.queue.clear()

    def _ready(self, slot: _Pending, payload: bytes) -> None:
        slot.data = payload
        self.server.stats.open -= 1
        self._flush()
        self._update_reading()

    def _flush(self) -> None:
        t = self.transport
        q = self.queue
        if t is None or not q or q[0].data is None:
            return
        out: list[bytes] = []
        close = False
        while q and q[0].data is not None:
            item = q.popleft()
            assert item.data is not None
            out.append(item.data)
            close = item.close
            if close:
                break
        t.write(b"".join(out))
        if close:
            self.closing = True
            self.queue.clear()
            t.close()

    def _fail(self, status: int) -> None:
        t = self.transport
        self.closing = True
        self._drop_queue()
        if t is not None:
            t.write(response(status, close=True))
            t.close()


# ------------------------------------------------------------ process


async def serve(
    host: str,
    port: int,
    status: int,
    behaviour: Behaviour,
    max_lifetime_s: float,
    *,
    hang: bool = False,
    max_arrivals: int = 0,
    tls: ssl.SSLContext | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    server_state = Server(status, behaviour, hang=hang, max_arrivals=max_arrivals)
    server = await loop.create_server(
        lambda: ReceiverProtocol(server_state),
        host,
        port,
        backlog=2048,
        reuse_address=True,
        ssl=tls,
    )
    actual = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"READY {actual}\n")
    sys.stdout.flush()

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    parent = os.getppid()
    deadline = time.monotonic() + max_lifetime_s
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if os.getppid() != parent:
                break  # orphaned: the harness is gone
            if time.monotonic() > deadline:
                sys.stderr.write("receiver: max lifetime reached, exiting\n")
                break
    finally:
        server.close()
        for conn in list(server_state.connections):
            if conn.transport is not None:
                conn.transport.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.receiver", description=__doc__)
    p.add_argument("--port", type=int, required=True, help="0 picks a free port")
    p.add_argument("--host", default=HOST, help=f"address to listen on ({HOST})")
    p.add_argument("--latency-ms", type=float, default=0.0, help="delay each POST's response")
    p.add_argument("--status", type=int, default=200, help="status answered to every POST")
    p.add_argument("--hang", action="store_true", help="never answer a POST")
    p.add_argument(
        "--record-arrivals", type=int, default=0, metavar="N",
        help="keep the arrival time of up to N distinct ids (GET /arrivals)",
    )  # fmt: skip
    p.add_argument("--fault", choices=("reset", "500", "hang", "cut"), help="misbehave this way")
    p.add_argument("--fault-share", type=float, default=0.0, help="on this share of POSTs")
    p.add_argument("--mix", default="", metavar="KIND=F,...", help="several faults (receiver_mix)")
    p.add_argument("--latency-lognormal", metavar="P50:P99", help="delays drawn lognormal (ms)")
    p.add_argument("--latency-uniform", metavar="LO:HI", help="delays drawn uniformly (ms)")
    p.add_argument("--seed", type=int, default=7, help="of the fault and delay draws")
    p.add_argument("--tls-cert", type=Path, help="serve https with this certificate (PEM)")
    p.add_argument("--tls-key", type=Path, help="... and this key (PEM)")
    p.add_argument("--max-lifetime-s", type=float, default=3600.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        sys.stderr.write("receiver: --port must be 0..65535\n")
        return 2
    if not 100 <= args.status <= 599 or args.latency_ms < 0 or args.latency_ms > 600_000:
        sys.stderr.write("receiver: --status must be 100..599, --latency-ms 0..600000\n")
        return 2
    if not 0 <= args.record_arrivals <= 1_000_000:
        sys.stderr.write("receiver: --record-arrivals must be 0..1000000\n")
        return 2
    if not 0.0 <= args.fault_share <= 1.0:
        sys.stderr.write("receiver: --fault-share must be 0..1\n")
        return 2
    try:
        faults = parse_mix(args.mix)
        if args.fault:
            faults.append((args.fault, args.fault_share))
        lognormal_ms = parse_lognormal(args.latency_lognormal) if args.latency_lognormal else None
        uniform_ms = parse_uniform(args.latency_uniform) if args.latency_uniform else None
        tls = None
        if args.tls_cert or args.tls_key:
            if not (args.tls_cert and args.tls_key):
                raise ValueError("--tls-cert and --tls-key go together")
            tls = server_tls(args.tls_cert, args.tls_key)
    except (ValueError, OSError, ssl.SSLError) as exc:
        sys.stderr.write(f"receiver: {exc}\n")
        return 2
    behaviour = Behaviour(
        latency_s=args.latency_ms / 1000,
        lognormal_ms=lognormal_ms,
        uniform_ms=uniform_ms,
        faults=faults,
        seed=args.seed,
    )
    coro = serve(
        args.host,
        args.port,
        args.status,
        behaviour,
        args.max_lifetime_s,
        hang=args.hang,
        max_arrivals=args.record_arrivals,
        tls=tls,
    )
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a core dependency
        asyncio.run(coro)
    except OSError as exc:
        sys.stderr.write(f"receiver: cannot listen on {args.host}:{args.port}: {exc.strerror}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
