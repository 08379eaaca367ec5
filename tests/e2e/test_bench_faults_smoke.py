"""A smoke run of the `faults` benchmark scenario: every case runs to the end,
nothing is lost, and the breaker never opens on scattered failures.

One test per case (`--case`), so that the five run side by side on the
suite's workers rather than one after another. Rates are not asserted (they
are measured by `make bench`, not tested).
"""

from __future__ import annotations

import pytest

from benchmarks.scenarios.faults import CASES, FAULT_KINDS
from tests.helpers import bench_smoke


@pytest.mark.parametrize(
    ("label", "kind"), [(c[0], kind) for c, kind in zip(CASES, FAULT_KINDS, strict=True)]
)
async def test_faults_smoke(server_url: str, label: str, kind: str) -> None:
    doc = await bench_smoke(server_url, "faults", "--case", kind)
    assert doc["scenario"] == "faults" and not doc["problems"], doc["problems"]
    cases = doc["cases"]
    assert set(cases) == {label}
    m = cases[label]
    assert m["lost"] == 0 and m["dead"] == 0 and m["delivered"] == doc["events"], label
    assert m["opened"] == 0, label
    assert m["exit_codes"] == [0], label
    if kind == "cut":  # a 2xx whose body is cut short is a delivery, not a retry
        assert m["attempts_per_event"] == 1.0


def test_the_cases_are_the_five_documented() -> None:
    assert [label for label, _, _ in CASES] == [
        "healthy", "30 % resets", "30 % 500s", "30 % hangs", "10 % cut bodies",
    ]  # fmt: skip
