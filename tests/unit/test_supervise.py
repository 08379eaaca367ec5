"""The supervisor's pure parts (issue 37, item 5): each child's line
labelled, its log format decided by the parent's terminal, a bad --http
refused in the parent."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dispatcher.cli import supervise
from dispatcher.core.errors import BadInput


def test_a_childs_lines_are_labelled() -> None:
    assert supervise.label(1, "dispatcher: stopping: nothing in flight") == (
        "dispatcher: worker process 1: stopping: nothing in flight"
    )
    assert supervise.label(0, "odd words") == "worker process 0: odd words"
    doc = json.loads(supervise.label(2, '{"ts":1.0,"event":"engine_started"}'))
    assert list(doc) == ["child", "ts", "event"] and doc["child"] == 2
    assert json.loads(supervise.label(3, "{}")) == {"child": 3}


def test_the_log_format_is_the_parents_terminal_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    assert supervise.child_log_env({})["DISPATCHER_LOG_FORMAT"] == "json"
    assert supervise.child_log_env({"DISPATCHER_LOG_FORMAT": "text"}) == {
        "DISPATCHER_LOG_FORMAT": "text"
    }


def test_a_bad_http_port_is_bad_input_in_the_parent() -> None:
    assert supervise.child_argv(["run", "--processes", "2", "--http", "127.0.0.1:8080"], 1) == [
        "run", "--http", "127.0.0.1:8081",
    ]  # fmt: skip
    with pytest.raises(BadInput, match="--http: HOST:PORT with a port number"):
        supervise.child_argv(["run", "--http=127.0.0.1:web"], 0)


def test_exit_statuses_name_their_signal() -> None:
    assert supervise._exit(-9) == {"code": -9, "signal": "SIGKILL"}
    assert supervise._exit(1) == {"code": 1}


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_only_a_child_with_its_own_sigterm_handler_is_ready() -> None:
    handles = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: None)"
    plain = "import time"
    for code, want in ((handles, True), (plain, False)):
        argv = [sys.executable, "-c", code + "; print(1, flush=True); time.sleep(9)"]
        with subprocess.Popen(argv, stdout=subprocess.PIPE) as child:
            assert child.stdout is not None and child.stdout.readline()
            assert supervise.ready(child.pid) is want
            child.kill()
    assert not supervise.ready(2**22 + 12345)  # no such process
