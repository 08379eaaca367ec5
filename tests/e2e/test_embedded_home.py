"""One embedded database per user (issue 37, item 1): a non-editable
install's `dispatcher`, typed in one directory and then in another with
DATABASE_URL and DISPATCHER_HOME unset, uses one PostgreSQL under the
user's data folder (`~/.local/share/dispatcher`, or `$XDG_DATA_HOME`'s),
says where when it starts it, and leaves no `./.dispatcher` behind."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from dispatcher.db import embedded
from tests.e2e.test_processes_installed import _install


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    into = tmp_path_factory.mktemp("site")
    _install(into, tmp_path_factory.mktemp("build"))
    return into


async def _dispatcher(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    """`dispatcher ARGS` typed in `cwd`: the installed package, never this checkout."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "dispatcher", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _user_env(installed: Path, user: Path, **extra: str) -> dict[str, str]:
    drop = ("DATABASE_URL", "XDG_DATA_HOME", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_") and k not in drop}
    env.update(HOME=str(user), PYTHONPATH=str(installed), DISPATCHER_ALLOW_PRIVATE_TARGETS="1")
    env.update(extra)
    return env


async def test_one_embedded_database_per_user_whatever_the_directory(
    installed: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user"
    here, there = tmp_path / "project-a", tmp_path / "elsewhere"
    for d in (user, here, there):
        d.mkdir()
    env = _user_env(installed, user)
    home = user / ".local" / "share" / "dispatcher"
    try:
        code, _, err = await _dispatcher(env, here, "migrate")
        assert code == 0, err
        [said] = err.splitlines()
        assert f"(data in {home / 'pgdata'})" in said, said

        code, out, err = await _dispatcher(
            env, here, "endpoint", "add", "--url", "http://127.0.0.1:9/orders", "--json"
        )
        assert code == 0, err
        made = json.loads(out)["id"]

        # Another directory: the same server, already running, and the endpoint.
        code, out, err = await _dispatcher(env, there, "endpoint", "list", "--json")
        assert code == 0 and err == "", err
        assert [e["id"] for e in json.loads(out)] == [made]
        code, out, _ = await _dispatcher(env, there, "db", "status", "--json")
        assert json.loads(out)["data_dir"] == str(home / "pgdata")
        assert not (here / ".dispatcher").exists() and not (there / ".dispatcher").exists()

        # XDG_DATA_HOME moves the default; DISPATCHER_HOME still overrides it.
        xdg = tmp_path / "xdg"
        code, out, _ = await _dispatcher({**env, "XDG_DATA_HOME": str(xdg)}, there,
                                         "db", "status", "--json")  # fmt: skip
        assert json.loads(out)["data_dir"] == str(xdg / "dispatcher" / "pgdata")
        own = tmp_path / "own"
        code, out, _ = await _dispatcher({**env, "DISPATCHER_HOME": str(own)}, there,
                                         "db", "status", "--json")  # fmt: skip
        assert json.loads(out)["data_dir"] == str(own / "pgdata")
    finally:
        embedded.stop(home)
