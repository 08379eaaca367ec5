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
    # The path a newcomer takes: a receiver, an endpoint, events, a drain, reports.
    for step in ("endpoint add", "enqueue", "run --drain", "dlq analyze", "db stop"):
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
    # The receiver verified and printed each of the three events once.
    for event_id in ("ord-42", "ord-43", "ord-44"):
        assert sum(line.startswith(event_id) for line in out.splitlines()) == 1, out
    assert '"delivered_last_hour":3' in out, out
    assert str(home.resolve() / "pgdata") in err  # it said where the database lives
    # The walk leaves nothing in the clone (issue 25: order.json and
    # events.jsonl were left in the repository), and cleans its scratch up.
    assert sorted(p.name for p in work.iterdir()) == [".venv", "examples"]
    assert list(scratch.iterdir()) == []
