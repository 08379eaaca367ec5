"""Broker destinations: one connection per broker link, publishes
acknowledged durably, failures in the sender's vocabulary.

`Brokers` is the sender's (sender.py hands it every attempt whose wire
names a broker). Each broker is one module with a `connect` that gives a
`Link` (amqp.py, nats.py, redisstream.py); a new broker (Kafka, SQS) is one
more module and one line in `_CONNECTORS`. A link serves every endpoint
with the same scheme, host, port and credentials; it is opened on first
use, dropped on a connection-level failure and opened again after a
backoff with full jitter, so a broker that is down costs one connect try
per backoff, not one per delivery. In flight on a link are the publishes
the broker has not yet confirmed (the endpoint's gate bounds them).
"""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.core.destinations import AMQP, NATS, REDIS, BrokerTarget
from dispatcher.core.errors import TargetRefused
from dispatcher.core.models import AttemptResult, Verdict
from dispatcher.core.ssrf import check_address, literal_address
from dispatcher.worker.attempterrors import attempt_error, refused_target
from dispatcher.worker.brokers.link import (
    BrokerFailure,
    BrokerMessage,
    Connect,
    Link,
)

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
MAX_ERROR_LEN = 300


def _connectors() -> dict[str, Connect]:
    # Imported here: the clients load only in a worker that publishes.
    from dispatcher.worker.brokers import amqp, nats, redisstream

    return {AMQP: amqp.connect, NATS: nats.connect, REDIS: redisstream.connect}


@dataclass(slots=True)
class _Slot:
    link: Link | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failures: int = 0
    retry_at: float = 0.0
    why: str = ""
    permanent: bool = False  # the last failure (refused credentials) will not pass by itself


class Brokers:
    """Every broker link of one process."""

    def __init__(
        self,
        *,
        tls: Callable[[], ssl.SSLContext],
        allow_private: bool,
        allowed_networks: tuple[str, ...] = (),
        allowed: frozenset[str] = frozenset(),
    ) -> None:
        self._tls = tls
        self._allow_private = allow_private
        self._allowed_networks = allowed_networks
        # DISPATCHER_BROKERS_ALLOWED: brokers the operator named, trusted
        # wherever they are (a private address included).
        self._allowed = allowed
        self._slots: dict[tuple[object, ...], _Slot] = {}
        self._connectors: dict[str, Connect] | None = None

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> AttemptResult:
        """One publish, timed; the caller bounds it by the endpoint's timeout."""
        t0 = time.perf_counter()
        slot = self._slots.get(target.link)
        if slot is None:
            slot = self._slots[target.link] = _Slot()
        try:
            link = await self._link(target, slot)
            await link.publish(target, msg)
        except BrokerFailure as exc:
            if exc.drop:
                await self._drop(slot, exc.word)
            verdict = Verdict.PERMANENT if exc.permanent else Verdict.RETRYABLE
            return _failed(verdict, t0, exc.word)
        except TargetRefused as exc:
            return _failed(Verdict.PERMANENT, t0, refused_target(str(exc)))
        except TimeoutError:  # the client's own (an OSError: before the next)
            return _failed(Verdict.RETRYABLE, t0, "timeout", timed_out=True)
        except (OSError, ConnectionError, EOFError) as exc:
            word = attempt_error(exc)
            await self._drop(slot, word)
            return _failed(Verdict.RETRYABLE, t0, word)
        ms = int((time.perf_counter() - t0) * 1000)
        slot.failures = 0
        return AttemptResult(verdict=Verdict.SUCCESS, status_code=None, response_ms=ms,
                             timing=(None, None, None, ms / 1000))  # fmt: skip

    async def _link(self, target: BrokerTarget, slot: _Slot) -> Link:
        if slot.link is not None:
            return slot.link
        async with slot.lock:  # one connect for every publish waiting on it
            if slot.link is not None:
                return slot.link
            if time.monotonic() < slot.retry_at:
                if slot.permanent:
                    raise BrokerFailure(slot.why, permanent=True)
                raise BrokerFailure(f"{slot.why} (reconnecting)", permanent=False)
            host = await self._vetted_host(target)
            if self._connectors is None:
                self._connectors = _connectors()
            context = self._tls() if target.tls else None
            try:
                slot.link = await self._connectors[target.kind](target, host, context)
            except BrokerFailure as exc:
                self._backoff(slot, exc.word, permanent=exc.permanent)
                raise
            except (OSError, ConnectionError, EOFError) as exc:
                self._backoff(slot, attempt_error(exc))
                raise
            return slot.link

    async def _vetted_host(self, target: BrokerTarget) -> str:
        """The address to connect to, after the SSRF guard (DISPATCHER_ALLOW_
        PRIVATE_TARGETS, DISPATCHER_ALLOWED_NETWORKS) saw it; a broker the
        operator allowed is trusted as named. With TLS the name is kept (the
        certificate is checked against it, so a name rebound to another
        address fails there); without, the checked address is dialled."""
        if target.allow_key in self._allowed or self._allow_private:
            return target.host
        if literal_address(target.host) is not None:
            addresses = [target.host]
        else:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise BrokerFailure(attempt_error(exc), permanent=False) from None
            addresses = [str(info[4][0]) for info in infos]
        refused: TargetRefused | None = None
        for address in addresses:
            try:
                check_address(target.host, address, allow_private=False,
                              allowed_networks=self._allowed_networks)  # fmt: skip
            except TargetRefused as exc:
                refused = exc
                continue
            return target.host if target.tls else address
        assert refused is not None
        raise refused

    def _backoff(self, slot: _Slot, why: str, *, permanent: bool = False) -> None:
        slot.failures += 1
        slot.permanent = permanent
        ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(slot.failures, 16))
        slot.retry_at = time.monotonic() + random.uniform(0, ceiling)
        slot.why = why

    async def _drop(self, slot: _Slot, why: str) -> None:
        link, slot.link = slot.link, None
        if link is not None:
            self._backoff(slot, why)
            await _quietly_closed(link)

    async def close(self) -> None:
        for slot in self._slots.values():
            link, slot.link = slot.link, None
            if link is not None:
                await _quietly_closed(link)
        self._slots.clear()


async def _quietly_closed(link: Link) -> None:
    try:
        async with asyncio.timeout(2):
            await link.close()
    except Exception:  # a link being dropped may fail to close: it is gone either way
        pass


def _failed(verdict: Verdict, t0: float, error: str, *, timed_out: bool = False) -> AttemptResult:
    ms = int((time.perf_counter() - t0) * 1000)
    return AttemptResult(verdict=verdict, status_code=None, response_ms=ms,
                         error=error[:MAX_ERROR_LEN], timed_out=timed_out)  # fmt: skip
