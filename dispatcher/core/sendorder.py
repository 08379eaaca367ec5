"""The order attempts were sent in, for the breaker: a pure policy (the
clock is passed in)."""

from __future__ import annotations

from collections import deque


class SendOrder:
    """Puts attempt results back in the order the attempts were sent.

    Requests finish out of order: a reset comes back at once while the
    successes sent around it are still on the wire; a request that hangs
    times out long after the successes sent with it. Counted in completion
    order, either would turn scattered failures into a run and open the
    breaker; so a result is released only once every attempt sent before it
    has ended. Every attempt ends by its timeout, so the wait is bounded by
    it; `horizon_s` (a little more) is only a backstop for one that never
    reports: it is then passed over, and counted on its own if it ever ends.
    """

    __slots__ = ("_done", "_late", "_next", "_open", "horizon_s")

    def __init__(self, horizon_s: float = 60.0) -> None:
        self.horizon_s = horizon_s
        self._next = 0
        # (sequence number, sent at) not yet released. Numbered as sent, so
        # appended in order: a queue, not a heap.
        self._open: deque[tuple[int, float]] = deque()
        self._done: dict[int, bool | None] = {}
        self._late: set[int] = set()  # passed over while still on the wire

    def sent(self, now: float) -> int:
        seq = self._next
        self._next += 1
        self._open.append((seq, now))
        return seq

    def completed(self, seq: int, ok: bool | None, now: float) -> list[bool]:
        """Records one result (None: the attempt never counted); returns the
        results now in order, oldest first."""
        opened, done = self._open, self._done
        if opened and opened[0][0] == seq:
            # The oldest still on the wire (most often, at a steady pace):
            # released at once, then whatever ended after it.
            opened.popleft()
            ready = [] if ok is None else [ok]
        else:
            ready = []
            if seq in self._late:
                self._late.discard(seq)
                if ok is not None:
                    ready.append(ok)
            else:
                done[seq] = ok
        while opened:
            head, sent_at = opened[0]
            if head in done:
                result = done.pop(head)
                if result is not None:
                    ready.append(result)
            elif now - sent_at > self.horizon_s:
                self._late.add(head)
            else:
                break
            opened.popleft()
        return ready
