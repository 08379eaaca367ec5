"""`make test` on a machine without what some tests need ends by saying
what it skipped and why, and the one command that installs the rest
(issue 37, item 7): here pytest itself, as the Makefile runs it, on the
Node SDK and dashboard tests with node and chromium off PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_run_ends_with_the_skips_and_the_install_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DISPATCHER_"))}
    env["PATH"] = str(Path(sys.executable).parent)  # no node, npm or chromium there
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/sdk/test_svix_js.py", "tests/e2e/test_dashboard.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tail = done.stdout[done.stdout.index("skipped, and why") :].splitlines()
    assert tail[1].endswith("test(s) skipped here, by reason:"), done.stdout
    assert any(line.endswith("  chromium is not installed (.ci/run installs it)") for line in tail)
    assert any(line.endswith("  1  node/npm not installed") for line in tail), done.stdout
    install = [line for line in tail if "apt-get install -y" in line]
    assert install and install[0].endswith("apt-get install -y chromium nodejs npm"), done.stdout
