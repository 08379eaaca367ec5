"""What a test run could not run here, and the one command that installs it
(issue 37, item 7): the end of `make test` groups its skips by reason and,
when a skip names a program this machine lacks, prints the apt-get line
that installs it, the packages .ci/run installs (and node for the Node SDK
test, PostgreSQL's server binaries for the standby test).

Pure: the conftest hook hands in the skip reasons and how to find a program.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

Which = Callable[[str], str | None]

# (word a skip reason uses, programs that must be on PATH, Debian packages)
# in the order the install line lists them.
NEEDS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("chromium", ("chromium|chromium-browser",), ("chromium",)),
    ("node", ("node", "npm"), ("nodejs", "npm")),
    ("patroni", ("patroni", "etcd", "iptables"), ("patroni", "etcd-server", "iptables")),
    ("postgresql server binaries", ("initdb",), ("postgresql",)),
)


def _found(program: str, which: Which) -> bool:
    return any(which(name) for name in program.split("|"))


def packages(reasons: Iterable[str], which: Which = shutil.which) -> list[str]:
    """The Debian packages that would let the skipped tests run: those of
    each program a reason names and this machine does not have."""
    text = " ".join(reasons).lower()
    out: list[str] = []
    for word, programs, debs in NEEDS:
        if word in text and not all(_found(p, which) for p in programs):
            out += [d for d in debs if d not in out]
    return out


def reason_of(longrepr: object) -> str:
    """A skip report's reason: pytest keeps (path, line, "Skipped: why")."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def summary(reasons: Sequence[str], which: Which = shutil.which, root: bool = False) -> list[str]:
    """The lines that end the run: nothing when nothing was skipped."""
    if not reasons:
        return []
    lines = [f"{len(reasons)} test(s) skipped here, by reason:"]
    for why, n in sorted(Counter(reasons).items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {n:>3}  {why}")
    debs = packages(reasons, which)
    if debs:
        sudo = "" if root else "sudo "
        lines.append(
            "to run them too, install what they need (Debian/Ubuntu; .ci/run does it itself): "
            f"{sudo}apt-get install -y {' '.join(debs)}"
        )
    return lines
