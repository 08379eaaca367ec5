"""`dispatcher run --processes 2` of a non-editable install, started from
inside a source checkout (issue 32, row 17): the children run the
installed package, never the `dispatcher/` folder in the working directory.

Before the fix each child was `python -m dispatcher`, which imports from
the working directory first: here that is a package that cannot import, so
every child died at once, was restarted forever and delivered nothing.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from dispatcher.db import catalog
from tests.helpers import WORKER_ENV, add_endpoint, cli_env
from tests.receivers import Receiver

ROOT = Path(__file__).resolve().parents[2]
# What a wheel is built from; the rest of the checkout (tests, .venv, .git) is not needed.
SOURCE = ("pyproject.toml", "README.md", "dispatcher", "schema")


def _install(into: Path, build: Path) -> None:
    """A plain (non-editable) `pip install --target` of this source, built
    from a copy so the shared checkout gets no build/ folder."""
    src = build / "src"
    src.mkdir()
    for name in SOURCE:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, src / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-cache-dir",
         "--disable-pip-version-check", "--target", str(into), str(src)],
        timeout=180, capture_output=True,
    )  # fmt: skip
    if done.returncode != 0:
        # No build backend to be had (an offline machine): the wheel's layout
        # by hand, as [tool.setuptools] maps it, and the console script.
        shutil.copytree(src / "dispatcher", into / "dispatcher")
        shutil.copytree(src / "schema", into / "dispatcher" / "schema")
        (into / "bin").mkdir()
        (into / "bin" / "dispatcher").write_text(
            "import sys\nfrom dispatcher.cli.main import main\nsys.exit(main())\n"
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    into = tmp_path_factory.mktemp("site")
    _install(into, tmp_path_factory.mktemp("build"))
    assert (into / "dispatcher" / "schema").is_dir()
    return into


def _checkout(at: Path) -> Path:
    """A source checkout's shape in the working directory: a `dispatcher/`
    package, here one that cannot be imported at all."""
    (at / "dispatcher").mkdir()
    (at / "dispatcher" / "__init__.py").write_text(
        'raise ImportError("the checkout in the working directory was imported")\n'
    )
    (at / "dispatcher" / "__main__.py").write_text("")
    return at


async def test_children_of_an_installed_dispatcher_ignore_the_checkout_they_start_in(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, installed: Path, tmp_path: Path
) -> None:
    cwd = _checkout(tmp_path)
    await add_endpoint(conn, receiver.url("/r"))
    await catalog.enqueue_bulk(conn, [(f"e{i}", "t", "{}", None) for i in range(6)])
    env = cli_env(db_url, **WORKER_ENV, PYTHONPATH=str(installed))
    # The installed console script, as a deployment runs it: the parent
    # itself imports from the install (its sys.path[0] is the script's folder).
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(installed / "bin" / "dispatcher"), "run", "--processes", "2",
        "--drain", cwd=cwd, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    lines: list[str] = []

    async def read_log() -> None:
        # A child that dies fails the test at once, not after a timeout.
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(raw.decode(errors="replace"))
            if "child_died" in lines[-1]:
                return
        await proc.wait()

    try:
        await asyncio.wait_for(read_log(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    log = "".join(lines)[-3000:]
    assert "child_died" not in log, log
    assert proc.returncode == 0, log
    assert {r.headers["webhook-id"] for r in receiver.received} == {f"e{i}" for i in range(6)}
