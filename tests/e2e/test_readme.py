"""The README's "Using it" section, run literally.

Every `sh` block of that section (up to its first subsection) is run as one
bash script, in a fresh folder and a fresh `DISPATCHER_HOME` with
`DATABASE_URL` unset (the embedded PostgreSQL a newcomer gets), with the
repository's `.venv` and `examples/` where the README expects them. If the
README and the tool drift apart, this fails.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from dispatcher.db import embedded
from tests.conftest import REPO


def _section_blocks(readme: str, heading: str = "## Using it") -> list[str]:
    start = readme.index(f"\n{heading}\n") + len(heading) + 2
    nxt = re.search(r"^#{2,3} ", readme[start:], flags=re.MULTILINE)
    section = readme[start : start + nxt.start()] if nxt else readme[start:]
    return re.findall(r"^```sh\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)


def test_the_section_has_the_walk() -> None:
    blocks = _section_blocks((REPO / "README.md").read_text())
    script = "\n".join(blocks)
    # The path a newcomer takes: a receiver, an endpoint, events, a drain,
    # reports, a dead letter found, fixed and replayed.
    for step in ("endpoint add", "enqueue", "run --drain", "dlq list", "dlq analyze",
                 "dlq replay", "delivery show", "db stop"):  # fmt: skip
        assert f"dispatcher {step}" in script, step


async def test_readme_walk_runs_as_written(tmp_path: Path) -> None:
    venv = REPO / ".venv"
    if not (venv / "bin" / "activate").exists():
        pytest.skip("no .venv in the repository (make test creates it)")
    work = tmp_path / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(venv)
    (work / "examples").symlink_to(REPO / "examples")
    home = tmp_path / "home"
    script = "set -euo pipefail\n" + "\n".join(_section_blocks((REPO / "README.md").read_text()))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DISPATCHER_", "WEBHOOK_")) and k != "DATABASE_URL"}  # fmt: skip
    env["DISPATCHER_HOME"] = str(home)
    scratch = tmp_path / "tmp"  # the walk's mktemp, kept inside this test's folder
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    # Its own runtime folder: a tool that found none would make one in TMPDIR
    # (runtime-$UID, seen once in CI), which the walk's check below counts.
    (tmp_path / "run").mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", script, cwd=work, env=env, start_new_session=True,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 240)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        embedded.stop(home)  # whatever the script reached
    out, err = out_b.decode(), err_b.decode()
    assert proc.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err
    lines = out.splitlines()
    # The receiver verified and printed each event once, with its type
    # (issue 37: it printed `-`); ref-42 only after its replay.
    for event_id, kind in (("ord-42", "order.paid"), ("ord-43", "order.paid"),
                           ("ord-44", "order.paid"), ("ref-42", "order.refunded")):  # fmt: skip
        assert [line for line in lines if line.startswith(event_id)] == [f"{event_id}  {kind}"], out
    # Each step shows what its comment says (issue 37).
    assert "event ord-43: 1 delivery (id 2)" in lines, out
    assert "1 event read, 1 delivery queued" in lines, out
    assert re.search(r"^delivered_last_hour +3$", out, re.M), out
    assert re.search(r"^dead_letter +1 ", out, re.M), out
    dead = next(line for line in lines if line.startswith("4 ") and "ref-42" in line)
    assert "connection refused" in dead, out  # dlq list: the id replay and show take
    assert re.search(r"^2 .* gradual ", out, re.M) and "no attempt succeeded" in out, out
    assert '{"requeued":1}' in lines, out
    assert "attempts     1 of 1 since it was replayed, after 1 earlier attempt" in lines, out
    assert re.search(r"^1 .* connection refused .*\n2 .* HTTP 200 .* the first after the replay$",
                     out, re.M), out  # fmt: skip
    assert str(home.resolve() / "pgdata") in err  # it said where the database lives
    # The walk leaves nothing in the clone (issue 25: order.json and
    # events.jsonl were left in the repository), and cleans its scratch up.
    assert sorted(p.name for p in work.iterdir()) == [".venv", "examples"]
    assert list(scratch.iterdir()) == []
