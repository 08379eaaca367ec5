"""What `dispatcher run` tells a person as it works (issue 37): a start line
and dead letters as they happen, as text at a terminal and as JSON lines on
a pipe; an endpoint added while it runs at an address its SSRF guard
refuses, warned of as at start; a receiver swamped by the default
max_in_flight, named with the command that fixes it."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import sys
from pathlib import Path

import pytest
from aiohttp import web

from tests.helpers import WORKER_ENV, cli, cli_env
from tests.receivers import Behaviour, Receiver, status


async def _on_a_terminal(env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int, str]:
    """`dispatcher ARGS` with its stderr on a terminal (a pty), as typed in one."""
    master, slave = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    closed = asyncio.Event()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed it
            data = b""
        if data:
            chunks.append(data)
        else:
            loop.remove_reader(master)
            closed.set()

    loop.add_reader(master, readable)
    try:
        code = await asyncio.wait_for(proc.wait(), timeout)
        await asyncio.wait_for(closed.wait(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        loop.remove_reader(master)
        os.close(master)
    return code, b"".join(chunks).decode().replace("\r\n", "\n")


async def _add(db_url: str, url: str, *flags: str) -> int:
    code, out, err = await cli(db_url, "endpoint", "add", "--url", url, *flags, "--json")
    assert code == 0, err
    return int(json.loads(out)["id"])


async def _enqueue(db_url: str, tmp_path: Path, n: int) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("".join(
        json.dumps({"event_type": "t", "payload": {"n": i}, "event_id": f"e{i}"}) + "\n"
        for i in range(n)
    ))  # fmt: skip
    code, _, err = await cli(db_url, "enqueue", "--file", str(events))
    assert code == 0, err


async def test_at_a_terminal_the_worker_starts_and_dead_letters_in_words(
    db_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.routes["/fail"] = status(500)
    eid = await _add(db_url, receiver.url("/fail"), "--max-attempts", "1")
    await _enqueue(db_url, tmp_path, 8)
    code, said = await _on_a_terminal(cli_env(db_url, **WORKER_ENV), "run", "--drain")
    assert code == 0, said
    lines = said.splitlines()
    assert not [line for line in lines if line.startswith("{")], said  # no JSON at a terminal
    start = next(line for line in lines if " started on the database at " in line)
    assert start.startswith("dispatcher: worker w-"), start
    assert ", database " in start and "with 1 endpoint (1 enabled)" in start, start
    assert "it exits when nothing is left to send (--drain); Ctrl-C stops it sooner" in start
    dead = [line for line in lines if line.startswith("dispatcher: warning: dead letter: ")]
    assert len(dead) == 5, said  # then a count, not a line each
    assert all(f"to endpoint {eid}, after 1 attempt: HTTP 500 (`dispatcher dlq replay --id "
               in line for line in dead), dead  # fmt: skip
    assert "dispatcher: warning: and 3 more dead letters in the last " in said, said
    assert f"endpoint {eid} (3) (`dispatcher dlq analyze` says why)" in said, said
    assert lines[-1].startswith("dispatcher: worker w-") and "8 dead letters" in lines[-1], said
    assert '"n"' not in said  # never a payload


async def test_on_a_pipe_or_when_asked_the_same_is_json_lines(
    db_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.routes["/fail"] = status(500)
    eid = await _add(db_url, receiver.url("/fail"), "--max-attempts", "1")
    await _enqueue(db_url, tmp_path, 2)
    code, _, err = await cli(db_url, "run", "--drain", env=cli_env(db_url, **WORKER_ENV))
    assert code == 0, err
    docs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    started = next(d for d in docs if d["event"] == "engine_started")
    assert started["endpoints"] == 1 and started["enabled"] == 1 and started["database"]
    dead = [d for d in docs if d["event"] == "delivery_dead"]
    assert {d["endpoint_id"] for d in dead} == {eid} and len(dead) == 2
    assert dead[0]["error"] == "HTTP 500" and dead[0]["attempts"] == 1
    assert all(set(d) == {"ts", "level", "event", "delivery_id", "endpoint_id", "attempts",
                          "status_code", "error"} for d in dead)  # fmt: skip
    # Asked for JSON at a terminal: JSON.
    env = cli_env(db_url, **WORKER_ENV, DISPATCHER_LOG_FORMAT="json")
    code, said = await _on_a_terminal(env, "run", "--drain")
    assert code == 0, said
    assert any(json.loads(line)["event"] == "engine_started"
               for line in said.splitlines() if line.startswith("{")), said  # fmt: skip
    code, _, err = await cli(db_url, "run", "--drain",
                             env=cli_env(db_url, DISPATCHER_LOG_FORMAT="yaml"))  # fmt: skip
    assert code == 2 and "DISPATCHER_LOG_FORMAT must be auto, json or text" in err, err


async def _line(stream: asyncio.StreamReader, needle: str, timeout: float) -> str:
    async def find() -> str:
        while True:
            raw = await stream.readline()
            assert raw, f"the worker ended before printing {needle!r}"
            if needle in raw.decode():
                return raw.decode()

    return await asyncio.wait_for(find(), timeout)


@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_an_endpoint_added_while_running_that_the_guard_refuses_is_warned_of(
    db_url: str, receiver: Receiver, fmt: str
) -> None:
    env = cli_env(db_url, **WORKER_ENV, DISPATCHER_LOG_FORMAT=fmt)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the worker's guard is on
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "run", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        await _line(proc.stderr, "engine_started" if fmt == "json" else " started on ", 30)
        # Added from a shell whose guard allows it (DISPATCHER_ALLOW_PRIVATE_TARGETS=1).
        eid = await _add(db_url, receiver.url("/x"), "--max-attempts", "1")
        refused = "endpoint_target_refused" if fmt == "json" else "SSRF guard refuses"
        warned = await _line(proc.stderr, refused, 10)
        code, _, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}")
        assert code == 0, err
        dead = await _line(proc.stderr, "delivery_dead" if fmt == "json" else "dead letter", 10)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not receiver.received
    if fmt == "text":
        # The words `run` says at start for one it finds (test_cli_run.py).
        assert warned.rstrip("\n") == (
            f"dispatcher: warning: endpoint {eid} targets 127.0.0.1, which the SSRF guard "
            "refuses: its deliveries will fail as `refused target` "
            "(DISPATCHER_ALLOW_PRIVATE_TARGETS=1 allows private targets)"
        )
        assert "refused target: non-public address (DISPATCHER_ALLOW_PRIVATE_TARGETS)" in dead
    else:
        doc = json.loads(warned)
        assert doc["event"] == "endpoint_target_refused" and doc["level"] == "warning"
        assert doc["endpoint_id"] == eid and doc["host"] == "127.0.0.1"
        assert json.loads(dead)["error"].startswith("refused target")


def _swamped(at_a_time: int, each_s: float) -> Behaviour:
    """A toy receiver: answers `at_a_time` requests at once, each in `each_s`."""
    gate = asyncio.Semaphore(at_a_time)

    async def answer(_: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
        async with gate:
            await asyncio.sleep(each_s)
        return web.Response(status=200)

    return answer


async def test_a_swamped_receiver_is_named_with_the_command_that_helps(
    db_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.routes["/toy"] = _swamped(2, 0.3)
    eid = await _add(db_url, receiver.url("/toy"), "--timeout-ms", "1000", "--max-attempts", "1")
    await _enqueue(db_url, tmp_path, 40)
    env = cli_env(db_url, **WORKER_ENV, DISPATCHER_LOG_FORMAT="text")
    code, _, err = await cli(db_url, "run", "--drain", env=env)
    assert code == 0, err
    hints = [line for line in err.splitlines() if "timed out at once" in line]
    assert hints == [
        f"dispatcher: warning: 10 requests to endpoint {eid} timed out at once (within 2 s): "
        "the receiver may not take 100 at a time; lower max_in_flight (`dispatcher endpoint "
        f"update {eid} --max-in-flight 10`), or raise timeout_ms (now 1000) if it is only slow"
    ], err
    # The command it names is the one that exists.
    code, out, err = await cli(db_url, "endpoint", "update", str(eid), "--max-in-flight", "10",
                               "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["max_in_flight"] == 10, err
