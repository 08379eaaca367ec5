"""Throttling of failed credentials per client address: a pure policy.

Owns the count of recent failures per key (a client address, or an IPv6
/64: one host's whole prefix is one key) and the decision whether that key
may try a credential now. Past `limit` failures within `window_s` the key is
locked out until the oldest of them leaves the window, and the answer says
how long that is (SPEC: 429 with `Retry-After`). A locked-out key's attempts
are not checked, so they neither count nor extend the lockout.

Memory is bounded: at most `limit` timestamps per key and `max_keys` keys;
past that the key whose last failure is the oldest is forgotten first. It
never reads the clock (`now` is an argument, monotonic seconds) and does no
I/O: the web layer asks it and tells it.
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict, deque

WINDOW_S = 60.0
MAX_KEYS = 10_000


def address_key(remote: str | None) -> str:
    """The key of a client address: the address itself (an IPv4-mapped IPv6
    address as its IPv4 form), an IPv6 address as its /64, which one host
    usually holds whole; anything unparsable as it is."""
    if not remote:
        return ""
    try:
        ip = ipaddress.ip_address(remote.partition("%")[0])
    except ValueError:
        return remote
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class FailureThrottle:
    """Failures per key in a sliding window of `window_s` seconds.

    `limit` 0 turns throttling off (a deployment behind a proxy that shows
    every client as one address, which must then throttle itself).
    """

    __slots__ = ("_failures", "limit", "max_keys", "window_s")

    def __init__(self, limit: int, *, window_s: float = WINDOW_S, max_keys: int = MAX_KEYS) -> None:
        if limit < 0 or window_s <= 0 or max_keys < 1:
            raise ValueError("limit must be >= 0, window_s > 0, max_keys >= 1")
        self.limit = limit
        self.window_s = window_s
        self.max_keys = max_keys
        # key → failure times (oldest first, at most `limit`); the key whose
        # last failure is the oldest comes first.
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        horizon = now - self.window_s
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def retry_after(self, key: str, now: float) -> int | None:
        """None when `key` may try a credential now; else the whole seconds
        (at least 1) until it may."""
        if self.limit == 0:
            return None
        times = self._recent(key, now)
        if times is None or len(times) < self.limit:
            return None
        # Clamped: float sums can put a failure made just now a hair past the window.
        return min(max(1, math.ceil(times[0] + self.window_s - now)), math.ceil(self.window_s))

    def failed(self, key: str, now: float) -> None:
        """`key` offered a wrong credential at `now`."""
        if self.limit == 0:
            return
        times = self._recent(key, now)
        if times is None:
            times = self._failures[key] = deque(maxlen=self.limit)
            while len(self._failures) > self.max_keys:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(key)
        times.append(now)
