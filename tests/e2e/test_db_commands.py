"""`dispatcher db status|url|stop` on a temporary embedded PostgreSQL
(DATABASE_URL unset, DISPATCHER_HOME a fresh folder)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from dispatcher.db import embedded


async def _run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DISPATCHER_") and k != "DATABASE_URL"}  # fmt: skip
    env.update(extra)
    return env


async def test_embedded_status_url_stop(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(DISPATCHER_HOME=str(home))
    pgdata = str(home.resolve() / "pgdata")
    try:
        code, out, err = await _run(env, "db", "status", "--json")
        assert code == 0, err
        assert json.loads(out) == {"embedded": True, "running": False, "url": None,
                                   "data_dir": pgdata}  # fmt: skip

        code, out, err = await _run(env, "db", "url")
        assert code == 0, err
        url = out.strip()
        assert url.startswith("postgresql://") and len(out.splitlines()) == 1
        [said] = err.strip().splitlines()  # says so once, on stderr
        assert pgdata in said and "dispatcher db stop" in said

        code, out, err = await _run(env, "db", "status", "--json")
        assert json.loads(out) == {"embedded": True, "running": True, "url": url,
                                   "data_dir": pgdata}  # fmt: skip
        code, out, err = await _run(env, "migrate", "--json")
        assert code == 0, err
        assert err == ""  # already running: nothing started, nothing said
        json.loads(out)

        code, out, err = await _run(env, "db", "stop", "--json")
        assert code == 0, err
        assert json.loads(out)["stopped"] is True
        code, out, _ = await _run(env, "db", "status", "--json")
        assert json.loads(out)["running"] is False
        code, out, err = await _run(env, "db", "stop")
        assert code == 0 and "not running" in out, err

        # Any command starts it again, says so once, and the data is still there.
        code, out, err = await _run(env, "health", "--json")
        assert code == 0, err
        [said] = err.strip().splitlines()
        assert pgdata in said and "dispatcher db stop" in said
        assert json.loads(out)["pending"] == 0
    finally:
        embedded.stop(home)


async def test_with_database_url_nothing_embedded(tmp_path: Path) -> None:
    env = _env(
        DISPATCHER_HOME=str(tmp_path / "home"),
        DATABASE_URL="postgresql://postgres:s3cret-pw@127.0.0.1:1/nowhere",
    )
    code, out, err = await _run(env, "db", "status", "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "embedded": False,
        "running": False,
        "url": "postgresql://postgres:***@127.0.0.1:1/nowhere",
        "data_dir": None,
    }
    for args in (["db", "status"], ["db", "url"], ["db", "url", "--json"], ["db", "stop"]):
        code, out, err = await _run(env, *args)
        assert code == 0, err
        assert "s3cret-pw" not in out + err
    code, out, _ = await _run(env, "db", "stop", "--json")
    assert json.loads(out) == {"stopped": False, "embedded": False, "data_dir": None}
    assert not (tmp_path / "home").exists()
