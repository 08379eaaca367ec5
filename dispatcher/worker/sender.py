"""The HTTP adapter: sends, classifies. The only module using aiohttp's client.

It owns one ClientSession (one connector, keep-alive pool) for the process,
the resolver that keeps the SSRF guard on every connection, and what an
attempt's answer (or failure) means. What a request is built from, and its
signature, are wire.py's (`Sender.wire` makes an endpoint's).

It never logs or stores payloads or response bodies: a response body is read
up to a small cap only so the connection can go back to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from dispatcher.core import attemptdetail
from dispatcher.core.errors import BadInput, OperationalError, TargetRefused
from dispatcher.core.models import AttemptResult, Delivery, Endpoint, Timing, Verdict
from dispatcher.core.retry import classify_status, parse_retry_after
from dispatcher.core.shaping import SUCCESS_BODY_BYTES, body_matches
from dispatcher.core.ssrf import UNRESOLVED, check_address
from dispatcher.worker.attempterrors import attempt_error, refused_target
from dispatcher.worker.brokers import Brokers
from dispatcher.worker.brokers.link import BrokerMessage
from dispatcher.worker.deadlines import Deadlines
from dispatcher.worker.phases import CURRENT, Phases, TimedConnector
from dispatcher.worker.tracing import Tracing
from dispatcher.worker.wire import EndpointWire, load_client_cert

MAX_ERROR_LEN = 300
# aiohttp arms no timer of its own: the endpoint's timeout is kept by
# Deadlines (one sweeper for every request in flight).
NO_TIMER = aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None)


class GuardedResolver(AbstractResolver):
    """Resolves, then keeps only the addresses the SSRF guard allows.

    aiohttp connects to exactly what this returns, so there is no second
    lookup for a rebinding name to change its answer in.
    """

    def __init__(
        self,
        *,
        allow_private: bool,
        allowed_networks: tuple[str, ...] = (),
        inner: AbstractResolver | None = None,
        proxy_host: str | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._allowed_networks = allowed_networks
        self._inner = inner if inner is not None else DefaultResolver()
        # With a proxy, the only name this process resolves is the proxy's
        # (the proxy resolves the targets), and it may be a private address.
        self._proxy_host = proxy_host

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        t0 = time.perf_counter()
        answers = await self._inner.resolve(host, port, family)
        if (phases := CURRENT.get()) is not None:
            phases.dns = time.perf_counter() - t0
        if host == self._proxy_host:
            return answers
        kept = []
        refused: TargetRefused | None = None
        for a in answers:
            try:
                check_address(
                    host,
                    a["host"],
                    allow_private=self._allow_private,
                    allowed_networks=self._allowed_networks,
                )
            except TargetRefused as exc:
                refused = exc
                continue
            kept.append(a)
        if not kept:
            raise refused or TargetRefused(f"{host} {UNRESOLVED}")
        return kept

    async def close(self) -> None:
        await self._inner.close()


class Sender:
    def __init__(
        self,
        *,
        allow_private: bool,
        allowed_networks: tuple[str, ...] = (),
        body_cap: int = SUCCESS_BODY_BYTES,
        resolver: AbstractResolver | None = None,
        proxy: str | None = None,
        ca_file: Path | None = None,
        tracing: Tracing | None = None,
        brokers_allowed: frozenset[str] = frozenset(),
    ) -> None:
        self.allow_private = allow_private
        # Each attempt a span of its producer's trace, exported (tracing.py);
        # None: the trace goes on in the headers only.
        self.tracing = tracing
        self.allowed_networks = allowed_networks
        self._body_cap = body_cap
        self._resolver = resolver
        self._ca_file = ca_file
        self._session: aiohttp.ClientSession | None = None
        # Every attempt's timeout, kept by one sweeper that this sender runs
        # from start() to close(): no request can outlive its deadline
        # because nobody ran the sweeper.
        self.deadlines = Deadlines()
        self.sweeper: asyncio.Task[None] | None = None
        self._proxy = URL(proxy) if proxy else None
        # Broker destinations (amqp, nats, redis): their links, opened on use.
        self.brokers = Brokers(
            tls=self._verifying_context,
            allow_private=allow_private,
            allowed_networks=allowed_networks,
            allowed=brokers_allowed,
        )
        if self._proxy is not None and (self._proxy.scheme != "http" or not self._proxy.host):
            raise BadInput("DISPATCHER_HTTP_PROXY must be an http://host:port URL")

    def _tls(self) -> ssl.SSLContext | bool:
        """The connector's context: aiohttp's default without a CA file."""
        return True if self._ca_file is None else self._verifying_context()

    def _verifying_context(self) -> ssl.SSLContext:
        """The system store, plus DISPATCHER_CA_FILE's certificates when set.
        Certificates and host names are always verified."""
        ctx = ssl.create_default_context()
        if self._ca_file is None:
            return ctx
        try:
            ctx.load_verify_locations(cafile=str(self._ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise OperationalError(
                f"DISPATCHER_CA_FILE {self._ca_file}: cannot load CA certificates: {exc}"
            ) from None
        return ctx

    async def start(self) -> None:
        connector = TimedConnector(
            ssl=self._tls(),
            # Concurrency is bounded by the engine (global cap, per-endpoint
            # gates); the connector only pools, keeping sockets per host alive.
            limit=0,
            limit_per_host=0,
            keepalive_timeout=30,
            resolver=GuardedResolver(
                allow_private=self.allow_private,
                allowed_networks=self.allowed_networks,
                inner=self._resolver,
                proxy_host=self._proxy.host if self._proxy else None,
            ),
            ttl_dns_cache=60,
            enable_cleanup_closed=False,
        )
        # No skip_auto_headers: it takes aiohttp off its per-request fast path.
        # Response bodies are never decoded, so Accept-Encoding costs nothing.
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        self.sweeper = asyncio.create_task(self.deadlines.run(), name="dispatcher-deadlines")
        if self.tracing is not None:
            await self.tracing.open()

    async def close(self) -> None:
        await self.brokers.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.tracing is not None:
            await self.tracing.close()
        if self.sweeper is not None:
            self.sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sweeper
            self.sweeper = None

    def wire(self, endpoint: Endpoint) -> EndpointWire:
        tls: ssl.SSLContext | bool = True  # the connector's context (_tls)
        if endpoint.client_cert is not None and endpoint.client_key is not None:
            tls = self._verifying_context()
            load_client_cert(tls, endpoint.client_cert, endpoint.client_key)
        return EndpointWire(
            endpoint.url,
            endpoint.secrets,
            endpoint.timeout_ms,
            allow_private=self.allow_private,
            allowed_networks=self.allowed_networks,
            headers=endpoint.headers,
            method=endpoint.method,
            body_mode=endpoint.body_mode,
            success_body=endpoint.success_body,
            ssl_context=tls,
            macro_style=endpoint.macro_style,
            value_map=endpoint.value_map,
            app=endpoint.app,
        )

    def post(
        self,
        wire: EndpointWire,
        d: Delivery,
        doc: Any = None,
        shown: list[Any] | None = None,
        breaker: str | None = None,
    ) -> Coroutine[Any, Any, AttemptResult]:
        """One attempt of `d`, to await. `doc`: the payload as data
        (wire.prepare), needed when the wire is shaped (URL macros, form
        body). `shown` (a test shot, never the queue): gets the method, the
        URL sent and the start of the answer's body, to show a person once.
        `breaker`: the endpoint's breaker state it was admitted under, for
        the span. Untraced, the attempt's own coroutine: no frame of its own
        between the row's and the request's, which every resume of the
        request would pass through."""
        if self.tracing is None or shown is not None:
            return self._post(wire, d, doc, shown, None)
        return self._traced(wire, d, doc, breaker)

    async def _traced(
        self, wire: EndpointWire, d: Delivery, doc: Any, breaker: str | None
    ) -> AttemptResult:
        assert self.tracing is not None
        span, parent = self.tracing.start(d, wire, breaker)
        try:
            result = await self._post(wire, d, doc, None, parent)
        except BaseException:
            self.tracing.end(span, None)
            raise
        self.tracing.end(span, result)
        return result

    async def _post(
        self,
        wire: EndpointWire,
        d: Delivery,
        doc: Any,
        shown: list[Any] | None,
        traced: str | None,
    ) -> AttemptResult:
        """post's attempt; `traced`: the traceparent of this attempt's span."""
        event_id, body = d.event_id, d.body
        assert self._session is not None, "Sender.start() first"
        if wire.url_refusal is not None:
            return AttemptResult(
                verdict=Verdict.PERMANENT,
                status_code=None,
                response_ms=0,
                error=refused_target(wire.url_refusal),
            )
        if wire.broker is not None:
            return await self._publish(wire, d, traced)
        if wire.polled:  # claimed as its URL became poll: back to wait for the consumer
            return AttemptResult(verdict=Verdict.RETRYABLE, status_code=None, response_ms=0,
                                 error="polling endpoint: kept for its consumer")  # fmt: skip
        now = time.time()
        ts = int(now)
        target, data = wire.target, body
        if wire.shaped or wire.body_mode != "json":
            target, data = wire.request(d, now, body, doc)
        if shown is not None:
            shown += (wire.method, str(target))
        headers = wire.headers_for(event_id, ts, data)
        span: str | None = None
        if traced is not None or d.traceparent is not None:
            # This attempt is a span of the producer's trace (SPEC "Traces").
            child = traced or attemptdetail.child_traceparent(d.traceparent or "")
            headers["traceparent"] = child
            span = child[36:52]
            if d.tracestate is not None:
                headers["tracestate"] = d.tracestate
        # A postback's URL as fired (its macro values filled in): kept with
        # the attempt, shown only within its application (schema 024).
        fired = str(target) if wire.shaped else None
        answer = b""
        phases = Phases()
        token = CURRENT.set(phases)
        remote: str | None = None
        got = b"[]"
        t0 = time.perf_counter()
        ttfb = 0.0
        # Kept by this sender's sweeper (started with it); the whole attempt,
        # connecting and reading the body included, is under the timeout.
        watch = self.deadlines.watch(wire.timeout_s)
        try:
            async with self._session.request(
                wire.method,
                target,
                data=data if wire.body_mode != "none" else None,
                headers=headers,
                allow_redirects=False,
                timeout=NO_TIMER,
                proxy=self._proxy,
                ssl=wire.ssl,
            ) as resp:
                ttfb = time.perf_counter() - t0
                status = resp.status
                ms = int(ttfb * 1000)
                retry_after = resp.headers.get("retry-after")
                got = attemptdetail.redact_headers_of(resp.raw_headers, resp.headers.items())
                remote = _peer(resp)
                try:
                    answer = await self._drain(resp)
                except (aiohttp.ClientError, OSError, TimeoutError):
                    # The status line arrived in time: that is the answer.
                    # A body cut short after a 2xx is still a delivery
                    # (retrying it would send a duplicate by design).
                    pass
                except asyncio.CancelledError:
                    if not self.deadlines.expired(watch):
                        raise
        except TargetRefused as exc:
            why = refused_target(str(exc))
            return self._failed(Verdict.PERMANENT, t0, why, detail=_record(phases, t0))
        except asyncio.CancelledError:
            if not self.deadlines.expired(watch):
                raise
            return self._failed(
                Verdict.RETRYABLE, t0, f"timeout after {wire.timeout_ms} ms", timed_out=True,
                detail=_record(phases, t0, fired, span),
            )  # fmt: skip
        except TimeoutError:
            # Not ours (a limit of asyncio's, the TLS handshake's say): still
            # the endpoint too slow to answer, for its adaptive limit too.
            failed = _record(phases, t0, fired, span)
            return self._failed(Verdict.RETRYABLE, t0, "timeout", timed_out=True, detail=failed)
        except (aiohttp.ClientError, OSError) as exc:
            failed = _record(phases, t0, fired, span)
            return self._failed(Verdict.RETRYABLE, t0, attempt_error(exc), detail=failed)
        finally:
            self.deadlines.done(watch)
            CURRENT.reset(token)
        if shown is not None:
            shown.append(answer)
        # For the record, the per-endpoint histograms (metrics.py) and the span.
        timing: Timing = (phases.dns, phases.connect(), phases.tls, ttfb)
        detail = attemptdetail.answered(
            timing, time.perf_counter() - t0, remote, got, answer, fired, span
        )
        verdict = classify_status(status)
        if verdict is Verdict.SUCCESS:
            if wire.success is not None and not body_matches(wire.success, answer):
                # Postback receivers answer 200 with success=false.
                return AttemptResult(
                    verdict=Verdict.RETRYABLE,
                    status_code=status,
                    response_ms=ms,
                    error="response did not match success_body",
                    detail=detail,
                    timing=timing,
                    remote_addr=remote,
                )
            return AttemptResult(verdict=verdict, status_code=status, response_ms=ms,
                                 detail=detail, timing=timing, remote_addr=remote)  # fmt: skip
        wait = parse_retry_after(retry_after, now) if status in (429, 503) else None
        return AttemptResult(
            verdict=verdict,
            status_code=status,
            response_ms=ms,
            error=f"HTTP {status}",
            retry_after_s=wait,
            gone=status == 410,
            overloaded=status in (429, 503),
            detail=detail,
            timing=timing,
            remote_addr=remote,
        )

    async def _publish(self, wire: EndpointWire, d: Delivery, traced: str | None) -> AttemptResult:
        """An attempt to a broker: the same bytes and signed headers an HTTP
        receiver gets (SPEC "Destinations"), under the endpoint's timeout."""
        assert wire.broker is not None
        ts = int(time.time())
        headers = wire.broker_headers(d.event_id, ts, d.body)
        headers["event-type"] = d.event_type
        if traced is not None or d.traceparent is not None:
            headers["traceparent"] = traced or attemptdetail.child_traceparent(d.traceparent or "")
            if d.tracestate is not None:
                headers["tracestate"] = d.tracestate
        msg = BrokerMessage(d.body, headers, d.event_id, d.event_type, ts)
        t0 = time.perf_counter()
        watch = self.deadlines.watch(wire.timeout_s)
        try:
            return await self.brokers.publish(wire.broker, msg)
        except asyncio.CancelledError:
            if not self.deadlines.expired(watch):
                raise
            return self._failed(Verdict.RETRYABLE, t0, f"timeout after {wire.timeout_ms} ms",
                                timed_out=True)  # fmt: skip
        finally:
            self.deadlines.done(watch)

    async def _drain(self, resp: aiohttp.ClientResponse) -> bytes:
        # Up to the cap, so a small body leaves the connection reusable; a
        # bigger one is abandoned and the connection closed on release.
        # Kept: --success-body matches it, the attempt's record keeps its start.
        left = self._body_cap
        kept: list[bytes] = []
        while left > 0:
            chunk = await resp.content.read(left)
            if not chunk:
                break
            left -= len(chunk)
            kept.append(chunk)
        return b"".join(kept)

    @staticmethod
    def _failed(
        verdict: Verdict,
        t0: float,
        error: str,
        *,
        timed_out: bool = False,
        detail: bytes | None = None,
    ) -> AttemptResult:
        ms = int((time.perf_counter() - t0) * 1000)
        return AttemptResult(
            verdict=verdict,
            status_code=None,
            response_ms=ms,
            error=error[:MAX_ERROR_LEN],
            timed_out=timed_out,
            detail=detail,
        )


def _peer(resp: aiohttp.ClientResponse) -> str | None:
    """The address that answered (the proxy's, through one). The response
    may have handed its connection back already (a body read whole with the
    headers), its protocol stays: aiohttp's own attribute, read defensively."""
    proto = getattr(resp, "_protocol", None)
    transport = getattr(proto, "transport", None)
    peer = None if transport is None else transport.get_extra_info("peername")
    return None if not peer else str(peer[0])


def _record(phases: Phases, t0: float, fired: str | None = None, span: str | None = None) -> bytes:
    """An unanswered attempt's record (core.attemptdetail): DNS, the TCP
    connect and the TLS handshake when this attempt opened a connection."""
    return attemptdetail.encode(
        dns_s=phases.dns,
        connect_s=phases.connect(),
        tls_s=phases.tls,
        ttfb_s=None,
        total_s=time.perf_counter() - t0,
        request_url=fired,
        span_id=span,
    )
