"""The gates of this process: `Gates` holds one per endpoint (endpointgate.Gate).

A refresh's endpoint states are applied here: a gate made for a new
endpoint, reconfigured for a changed one (its wire rebuilt only when what
it is built from changed), dropped for a gone one once nothing it claimed
is left, set aside with its reason when a row cannot be used (its
deliveries are dead-lettered, the other endpoints flow on), and handed the
membership's shares and the breakers the recorder wrote. An endpoint
whose address the SSRF guard refuses, seen after the first refresh (added,
moved there or enabled again while the worker runs), is warned of in the
words `run` uses at start for the ones it finds (core/refusals.py). The
engine and the refresher import both names from here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from dispatcher import log
from dispatcher.core import shares
from dispatcher.core.breaker import Breaker, BreakerState
from dispatcher.core.destinations import validate_destination
from dispatcher.core.models import Endpoint, validate_headers, validate_shape
from dispatcher.core.refusals import refused_host
from dispatcher.core.shaping import compile_success_body
from dispatcher.core.ssrf import TargetPolicy
from dispatcher.db.store import EndpointState
from dispatcher.worker.endpointgate import Gate
from dispatcher.worker.wire import EndpointWire

__all__ = ["GONE_HOLD_S", "Gate", "Gates"]

# How long a disable seen here (a 410, disable_after) outweighs a refresh that
# still reads the endpoint enabled: the recorder writes it within a flush, and an operator
# who enables it again at once waits this long at most.
GONE_HOLD_S = 10.0


def _wire_key(ep: Endpoint) -> tuple[object, ...]:
    """What an EndpointWire is built from."""
    return (ep.url, ep.secrets, ep.timeout_ms, ep.headers, ep.method, ep.body,
            ep.success_body, ep.client_cert, ep.client_key, ep.macro_style,
            ep.value_map)  # fmt: skip


class Gates:
    """Every endpoint's gate in this process, in a stable order for claims."""

    def __init__(
        self, wire: Callable[[Endpoint], EndpointWire], policy: TargetPolicy | None = None
    ) -> None:
        self._wire = wire
        # The SSRF guard's policy, to warn of a refused endpoint (None: never).
        self._policy = policy
        # The first refresh's endpoints were warned of by `run` at start.
        self._synced = False
        self._gates: dict[int, Gate] = {}
        self.ids: list[int] = []  # rotated per claim by the planner's caller

    def __getitem__(self, endpoint_id: int) -> Gate:
        return self._gates[endpoint_id]

    def get(self, endpoint_id: int) -> Gate | None:
        return self._gates.get(endpoint_id)

    def __iter__(self) -> Iterator[Gate]:
        return iter(self._gates.values())

    def __len__(self) -> int:
        return len(self._gates)

    def sync(
        self, states: list[EndpointState], worker: str, view: shares.View | None
    ) -> list[Gate]:
        """Applies a refresh (`view`: the membership read with it, None:
        alone); returns the gates whose probe may be due."""
        now_mono = time.monotonic()
        seen = set()
        due = []
        for state in states:
            seen.add(state.endpoint.id)
            try:
                gate = self._applied(state, worker, view, now_mono)
            except Exception as exc:
                # Whatever a row holds, it stops only its own deliveries.
                gate = self._set_aside(state, f"settings unusable ({type(exc).__name__})")
                gate.apply_share(view)  # its stand-in's defaults, shared as any
            if state.breaker.state is not BreakerState.CLOSED:
                due.append(gate)
        for gone in set(self._gates) - seen:
            if self._gates[gone].claimed == 0:
                del self._gates[gone]
                self.ids.remove(gone)
        self._synced = True
        return due

    def _applied(
        self, state: EndpointState, worker: str, view: shares.View | None, now_mono: float
    ) -> Gate:
        endpoint = state.endpoint
        gate = self._gates.get(endpoint.id)
        if gate is not None and gate.gone_at is not None:
            if not endpoint.enabled:
                gate.gone_at = None  # the database has it
            elif now_mono - gate.gone_at < GONE_HOLD_S:
                # A read from before the recorder wrote the 410's disable:
                # enabling it again would send the next row to a gone URL.
                endpoint = replace(endpoint, enabled=False)
        if gate is None or gate.endpoint != endpoint or gate.broken != state.broken:
            self._warn_refused(None if gate is None else gate.endpoint, endpoint)
            wire, broken = self._wired(gate, state)
            if gate is None:
                gate = Gate(endpoint, wire, state.breaker, broken)
                self._add(gate)
            else:
                gate.reconfigure(endpoint, wire, broken)
        gate.apply_share(view)
        gate.sync(state, worker, now_mono)
        return gate

    def _warn_refused(self, before: Endpoint | None, ep: Endpoint) -> None:
        """Once per change that makes the endpoint one to send to at an
        address the guard refuses: its deliveries would otherwise die as
        `refused target` with nothing said until the dead letters."""
        if self._policy is None or not self._synced or not ep.enabled:
            return
        if (
            before is not None
            and before.enabled
            and (before.url, before.macro_style) == (ep.url, ep.macro_style)
        ):
            return  # said already, or not refused: nothing the guard judges changed
        host = refused_host(ep.url, self._policy, ep.macro_style)
        if host is not None:
            log.event("endpoint_target_refused", logging.WARNING, endpoint_id=ep.id, host=host)

    def _add(self, gate: Gate) -> None:
        if gate.endpoint.id not in self._gates:
            self.ids.append(gate.endpoint.id)
        self._gates[gate.endpoint.id] = gate

    def _set_aside(self, state: EndpointState, reason: str) -> Gate:
        """A gate with default settings that dead-letters the endpoint's
        deliveries with `reason` (rows already claimed finish as they were)."""
        ep = state.endpoint
        stand_in = Endpoint(id=ep.id, url=ep.url, secrets=(), enabled=ep.enabled, app=ep.app)
        old = self._gates.get(ep.id)
        if old is not None and old.broken == reason:
            return old
        log.event("endpoint_broken", logging.ERROR, endpoint_id=ep.id, reason=reason)
        gate = Gate(stand_in, None, state.breaker, reason)
        if old is not None:
            gate.claimed = old.claimed
        self._add(gate)
        return gate

    def _wired(
        self, gate: Gate | None, state: EndpointState
    ) -> tuple[EndpointWire | None, str | None]:
        """The endpoint's wire (rebuilt only when what it is built from
        changed) or, when it cannot be built, None and why. Said once per change."""
        ep = state.endpoint
        broken, wire = state.broken, None
        if broken is None:
            if (
                gate is not None
                and gate.wire is not None
                and (_wire_key(gate.endpoint) == _wire_key(ep))
            ):
                wire = gate.wire
            else:
                wire, broken = self._built(ep)
        if broken != (gate.broken if gate is not None else None):
            if broken is None:
                log.event("endpoint_usable", endpoint_id=ep.id)
            else:
                log.event("endpoint_broken", logging.ERROR, endpoint_id=ep.id, reason=broken)
        return wire, broken

    def _built(self, ep: Endpoint) -> tuple[EndpointWire | None, str | None]:
        """The checks endpoint add makes, then the wire; a row written some
        other way gets them here, before anything is sent. The reason is
        ours, never the row's text (its URL or header values)."""
        checks: tuple[tuple[str, Callable[[], object]], ...] = (
            ("url refused", lambda: validate_destination(ep.url, ep.macro_style)),
            ("headers invalid", lambda: validate_headers(ep.headers)),
            ("success_body is not RE2 syntax", lambda: compile_success_body(ep.success_body)),
            ("method, body or ordering invalid", lambda: validate_shape(ep)),
        )
        for reason, check in checks:
            try:
                check()
            except Exception:
                return None, reason
        try:
            return self._wire(ep), None
        except Exception as exc:
            return None, f"wire unusable ({type(exc).__name__})"

    def short(self, view: shares.View) -> bool:
        """Some gate runs on less than its share of `view.live`."""
        return any(
            g.max_share < view.target(g.endpoint.max_in_flight, g.endpoint.id)
            for g in self._gates.values()
        )

    def held(self) -> list[tuple[int, int, int]]:
        """For each endpoint: (max_in_flight, id, rows this process holds),
        what core.shares.may_apply weighs."""
        return [(g.endpoint.max_in_flight, g.endpoint.id, g.held()) for g in self._gates.values()]

    def results_written(self, counts: dict[int, int], breakers: dict[int, Breaker]) -> None:
        for endpoint_id, n in counts.items():
            gate = self._gates.get(endpoint_id)
            if gate is not None:
                gate.results_written(n, breakers.get(endpoint_id))
