"""Hypothesis over everything a user types: accepted, or refused with BadInput."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.core.errors import BadInput
from dispatcher.core.models import validate_headers
from dispatcher.core.signing import validate_secret
from dispatcher.core.ssrf import validate_url
from dispatcher.ops.inputs import read_events, spec_from_fields

anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=8,
)
field_names = st.sampled_from(
    ["url", "secret", "event_types", "rate_per_s", "burst", "max_in_flight", "timeout_ms",
     "max_attempts", "retry_base_ms", "retry_cap_ms", "failure_threshold", "cooldown_s",
     "headers", "signature", "nonsense"]
)  # fmt: skip


@given(st.dictionaries(field_names, anything, max_size=6))
def test_endpoint_fields(data: dict[str, object]) -> None:
    try:
        spec = spec_from_fields(data)
    except BadInput as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert spec.url == data["url"]


@given(st.text(max_size=200) | st.from_regex(r"https?://[a-z0-9.\-\[\]:]{0,30}(/[ -~]{0,20})?"))
def test_urls(url: str) -> None:
    try:
        assert validate_url(url) == url
    except BadInput as exc:
        assert "\n" not in str(exc)


@given(st.lists(st.tuples(st.text(max_size=30), st.text(max_size=60)), max_size=5))
def test_headers(headers: list[tuple[str, str]]) -> None:
    try:
        validate_headers(tuple(headers))
    except BadInput:
        return
    for name, value in headers:
        assert "\r" not in value and "\n" not in value
        assert not name.lower().startswith("webhook-")


@given(st.text(max_size=80) | st.from_regex(r"wh(sec|sk)_[A-Za-z0-9+/=]{0,90}", fullmatch=True))
def test_secrets(secret: str) -> None:
    try:
        validate_secret(secret)
    except BadInput:
        return
    assert secret.startswith(("whsec_", "whsk_"))


lines = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda d: __import__("json").dumps(d),
        st.dictionaries(st.sampled_from(["event_type", "payload", "event_id", "endpoint", "x"]),
                        anything, max_size=5),
    ),
)  # fmt: skip


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=150)
@given(st.lists(lines, max_size=6))
def test_enqueue_files(tmp_path: Path, content: list[str]) -> None:
    f = tmp_path / "events.jsonl"
    f.write_text("\n".join(content), encoding="utf-8", errors="surrogatepass")
    try:
        events = read_events(str(f), 256 * 1024)
    except BadInput as exc:
        assert str(exc).startswith(str(f))
        return
    for event_id, event_type, payload, endpoint, app in events:
        assert event_id and event_type and payload
        assert endpoint is None or isinstance(endpoint, int)
        assert app is None  # the generated lines never name one


def test_a_header_value_cannot_pose_as_a_sealed_one() -> None:
    with pytest.raises(BadInput, match="enc:v1:"):
        validate_headers((("X-Key", "enc:v1:AAAA"),))
