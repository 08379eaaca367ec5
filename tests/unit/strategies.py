"""Hypothesis strategies shared by the unit tests of pure policies."""

from __future__ import annotations

from hypothesis import strategies as st

from dispatcher.core.models import Outcome, Status

# A phase's seconds, or None (a reused connection has no DNS, connect, TLS).
_PHASE = st.none() | st.floats(0, 1)


def outcomes(max_size: int) -> st.SearchStrategy[list[Outcome]]:
    """A flush's outcomes: any status, spent or handed back, with or without
    an attempt count, a record and timings."""
    return st.lists(
        st.builds(
            Outcome,
            delivery_id=st.integers(1, 10**6),
            endpoint_id=st.integers(1, 3),
            status=st.sampled_from(list(Status)),
            next_attempt_in_s=st.floats(0, 100),
            spent_attempt=st.booleans(),
            status_code=st.none() | st.integers(100, 599),
            response_ms=st.none() | st.integers(0, 70_000),
            attempt=st.integers(-1, 5),
            detail=st.none() | st.binary(max_size=20),
            timing=st.none() | st.tuples(_PHASE, _PHASE, _PHASE, st.floats(0, 60)),
        ),
        max_size=max_size,
    )
