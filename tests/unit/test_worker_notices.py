"""What the worker says to a person as it runs (issue 37): log lines as text
or JSON, dead letters a few a minute, a burst of timeouts once, and an
endpoint the SSRF guard refuses when it is first seen after start."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from dispatcher import log
from dispatcher.core.breaker import Breaker
from dispatcher.core.models import AttemptResult, Endpoint, Outcome, Status, Verdict
from dispatcher.core.ssrf import TargetPolicy
from dispatcher.db.store import EndpointState
from dispatcher.settings import Settings
from dispatcher.worker import notices
from dispatcher.worker.endpointgate import TIMEOUTS_AT_ONCE
from dispatcher.worker.gate import Gate, Gates
from dispatcher.worker.notices import DeadLetters
from dispatcher.worker.wire import EndpointWire

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def _record(event: str, level: int = logging.INFO, **fields: Any) -> logging.LogRecord:
    record = logging.LogRecord("dispatcher", level, __file__, 1, event, None, None)
    record.fields = fields
    return record


def _text(event: str, level: int = logging.INFO, **fields: Any) -> str:
    return log._TextFormatter().format(_record(event, level, **fields))


def test_text_lines_read_like_the_cli_and_json_stays_json() -> None:
    line = _text("engine_started", worker="w-1", drain=False, wake="probe",
                 database="127.0.0.1:5432, database d", endpoints=3, enabled=2)  # fmt: skip
    assert line == (
        "dispatcher: worker w-1 started on the database at 127.0.0.1:5432, database d, "
        "with 3 endpoints (2 enabled); Ctrl-C stops it (a second Ctrl-C at once)"
    )
    assert _text("database_lost", logging.WARNING, where="claim", error="E") == (
        "dispatcher: warning: database_lost (where=claim, error=E)"
    )
    doc = orjson.loads(log._JsonFormatter().format(_record("engine_started", worker="w-1")))
    assert doc["event"] == "engine_started" and doc["worker"] == "w-1"


def test_text_lines_scrub_sensitive_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log, "_sensitive", frozenset({"click_id"}))
    assert "abc" not in _text("x", meta={"click_id": "abc"})


def test_a_sentence_missing_a_field_falls_back_to_the_plain_form() -> None:
    assert _text("delivery_dead", logging.WARNING, endpoint_id=3) == (
        "dispatcher: warning: delivery_dead (endpoint_id=3)"
    )


def test_auto_is_text_on_a_terminal_only() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert log._terminal(Tty()) and not log._terminal(io.StringIO())


@pytest.mark.parametrize("raw", ["", "auto", "json", "TEXT"])
def test_log_format_setting(raw: str) -> None:
    got = Settings.from_env({"DISPATCHER_LOG_FORMAT": raw}).log_format
    assert got == (raw.lower() or "auto")


def test_a_bad_log_format_is_bad_input() -> None:
    with pytest.raises(Exception, match="DISPATCHER_LOG_FORMAT must be auto, json or text"):
        Settings.from_env({"DISPATCHER_LOG_FORMAT": "yaml"})


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(log, "event", lambda name, level=0, **f: events.append((name, f)))
    yield events


def _dead(delivery: int, endpoint: int) -> Outcome:
    return Outcome(delivery, endpoint, Status.DEAD_LETTER, 0.0, True, 500, 3, "HTTP 500",
                   attempt=4)  # fmt: skip


def test_dead_letters_a_few_per_endpoint_then_one_count(said: list[Any]) -> None:
    now = [100.0]
    dl = DeadLetters(lambda: now[0])
    for i in range(40):
        dl.dead(_dead(i, 1))
    dl.dead(_dead(99, 2))
    shown = [f for name, f in said if name == "delivery_dead"]
    assert [f["delivery_id"] for f in shown] == [0, 1, 2, 3, 4, 99]
    assert shown[0] == {"delivery_id": 0, "endpoint_id": 1, "attempts": 5, "status_code": 500,
                        "error": "HTTP 500"}  # fmt: skip
    dl.tick()  # the window is not over: nothing more yet
    assert len(said) == 6
    now[0] += notices.WINDOW_S
    dl.tick()
    name, summary = said[-1]
    assert name == "dead_letters_unshown"
    assert summary["count"] == 35 and summary["endpoints"] == {"1": 35}
    # A new window shows the next ones again.
    dl.dead(_dead(100, 1))
    assert said[-1][1]["delivery_id"] == 100
    line = _text("dead_letters_unshown", logging.WARNING, **summary)
    assert "and 35 more dead letters in the last 60 s" in line and "endpoint 1 (35)" in line
    line = _text("delivery_dead", logging.WARNING, **shown[0])
    assert line == (
        "dispatcher: warning: dead letter: delivery 0 to endpoint 1, after 5 attempts: "
        "HTTP 500 (`dispatcher dlq replay --id 0` sends it again)"
    )


def test_dead_letters_across_endpoints_are_capped_too(said: list[Any]) -> None:
    dl = DeadLetters(lambda: 0.0)
    for eid in range(100):
        dl.dead(_dead(eid, eid))
    assert sum(1 for name, _ in said if name == "delivery_dead") == notices.SHOWN_IN_ALL
    dl.close()
    summary = said[-1][1]
    assert summary["count"] == 100 - notices.SHOWN_IN_ALL and summary["endpoint_count"] == 80
    assert len(summary["endpoints"]) == notices.NAMED_IN_SUMMARY


def _timed_out_gate(**kw: Any) -> Gate:
    ep = Endpoint(id=7, url="https://example.com/x", secrets=(SECRET,), **kw)
    return Gate(ep, EndpointWire(ep.url, ep.secrets, ep.timeout_ms, allow_private=False), Breaker())


def _timeouts(gate: Gate, n: int) -> None:
    timeout = AttemptResult(verdict=Verdict.RETRYABLE, status_code=None, response_ms=15000,
                            error="timeout", timed_out=True)  # fmt: skip
    for i in range(n):
        gate.completed(i, timeout, None, 0.0)


def test_many_timeouts_at_once_say_so_once(said: list[Any]) -> None:
    gate = _timed_out_gate()
    _timeouts(gate, TIMEOUTS_AT_ONCE - 1)
    assert not said
    _timeouts(gate, 50)
    hints = [f for name, f in said if name == "endpoint_timeouts_at_once"]
    assert hints == [{"endpoint_id": 7, "timeouts": TIMEOUTS_AT_ONCE, "within_s": 2.0,
                      "max_in_flight": 100, "suggested_max_in_flight": 10,
                      "timeout_ms": 15000}]  # fmt: skip
    line = _text("endpoint_timeouts_at_once", logging.WARNING, **hints[0])
    assert line == (
        "dispatcher: warning: 10 requests to endpoint 7 timed out at once (within 2 s): the "
        "receiver may not take 100 at a time; lower max_in_flight (`dispatcher endpoint "
        "update 7 --max-in-flight 10`), or raise timeout_ms (now 15000) if it is only slow"
    )


def test_a_small_max_in_flight_gets_the_hint_at_its_own_size(said: list[Any]) -> None:
    gate = _timed_out_gate(max_in_flight=4)
    _timeouts(gate, 4)
    assert said[-1][1]["suggested_max_in_flight"] == 2
    gate = _timed_out_gate(max_in_flight=1)
    _timeouts(gate, 30)
    assert len(said) == 1  # one in flight: lowering it is no answer


def _state(eid: int, url: str, enabled: bool = True) -> EndpointState:
    ep = Endpoint(id=eid, url=url, secrets=(SECRET,), enabled=enabled)
    return EndpointState(ep, Breaker(), None, None, 0.0)


def test_a_refused_endpoint_seen_after_start_is_warned_of_once(said: list[Any]) -> None:
    def wire(ep: Endpoint) -> EndpointWire:
        return EndpointWire(ep.url, ep.secrets, ep.timeout_ms, allow_private=False)

    gates = Gates(wire, TargetPolicy(allow_private=False))
    at_start = [_state(1, "http://127.0.0.1:9/a")]
    gates.sync(at_start, "w", None)
    assert not said  # `run` said it at start
    now = [*at_start, _state(2, "http://10.0.0.5/b"), _state(3, "https://example.com/c"),
           _state(4, "http://localhost:8080/d", enabled=False)]  # fmt: skip
    gates.sync(now, "w", None)
    gates.sync(now, "w", None)
    assert said == [("endpoint_target_refused", {"endpoint_id": 2, "host": "10.0.0.5"})]
    # Enabled, or moved to a refused address: said again.
    now[3] = _state(4, "http://localhost:8080/d")
    now[2] = _state(3, "http://[::1]:80/c")
    gates.sync(now, "w", None)
    assert [f["endpoint_id"] for _, f in said[1:]] == [3, 4]
    line = _text("endpoint_target_refused", logging.WARNING, endpoint_id=4, host="localhost")
    assert line == (
        "dispatcher: warning: endpoint 4 targets localhost, which the SSRF guard refuses: "
        "its deliveries will fail as `refused target` (DISPATCHER_ALLOW_PRIVATE_TARGETS=1 "
        "allows private targets)"
    )


def test_the_supervisors_lines_read_as_sentences() -> None:
    assert _text("supervisor_started", processes=2, pid=9) == (
        "dispatcher: running 2 worker processes (supervisor pid 9); Ctrl-C stops them all"
    )
    assert _text("child_died", child=1, pid=10, code=1, restart_in_s=0.5) == (
        "dispatcher: worker process 1 (pid 10) exited with code 1: restarting it in 0.5 s"
    )
    assert (
        _text("child_died", child=0, pid=11, code=-9, signal="SIGKILL", restart_in_s=1.0)
        == "dispatcher: worker process 0 (pid 11) was killed by SIGKILL: restarting it in 1 s"
    )
    assert _text("child_lost", child=1, pid=12, code=-9, signal="SIGKILL") == (
        "dispatcher: worker process 1 (pid 12) was killed by SIGKILL while stopping, not as "
        "asked: what it held is retried when its lease ends"
    )
