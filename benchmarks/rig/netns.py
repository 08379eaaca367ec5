"""Hosts as network namespaces on one bridge: created, addressed, cut off
from one another by firewall rules in their own namespace, and removed.

Owns every namespace, veth and bridge it creates (all named with one run's
prefix, so two runs on one machine do not collide) and removes them in
`close`, killing whatever still runs inside; never touches an interface or
rule it did not create.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_PATH = Path("/run/dispatcher-rig.lock")
SUBNETS = range(77, 127)  # 10.N.0.0/24: the first one no other interface uses
_runs = itertools.count()  # rigs made by this process (one per replication mode)


def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One short administrative command (ip, iptables), bounded to 20 s."""
    res = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    if check and res.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {res.stderr.strip() or res.returncode}")
    return res


def missing_tools() -> list[str]:
    return [t for t in ("ip", "iptables") if shutil.which(t) is None]


@contextlib.contextmanager
def _allocation_lock() -> Iterator[None]:
    """Two rigs starting at once must not pick the same subnet."""
    with LOCK_PATH.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _free_subnet() -> int:
    used = run(["ip", "-4", "-o", "addr"]).stdout + run(["ip", "-4", "route"]).stdout
    for n in SUBNETS:
        if f" 10.{n}.0." not in used and f"10.{n}.0.0/" not in used:
            return n
    raise OSError("no free 10.N.0.0/24 subnet for the rig")


class Network:
    """A bridge in the root namespace and one namespace per host on it."""

    def __init__(self) -> None:
        # pid and run: unique on the machine; 8 chars, so that every name
        # made from it fits IFNAMSIZ (15).
        self.tag = f"dr{os.getpid() % 100000:05d}{next(_runs) % 10}"
        self.bridge = f"{self.tag}br"
        self.hosts: dict[str, str] = {}  # host -> address
        self.subnet = 0
        self._created_bridge = False

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (harness, producer)."""
        return f"10.{self.subnet}.0.1"

    def open(self) -> None:
        with _allocation_lock():
            self.subnet = _free_subnet()
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
            self._created_bridge = True
            run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
            run(["ip", "link", "set", self.bridge, "up"])

    def add_host(self, host: str) -> str:
        """A namespace with lo and one veth on the bridge; returns its address."""
        ns, n = self.ns(host), len(self.hosts) + 10
        addr = f"10.{self.subnet}.0.{n}"
        outer, inner = f"{self.tag}v{n}", f"{self.tag}i{n}"
        run(["ip", "netns", "add", ns])
        self.hosts[host] = addr
        run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
        run(["ip", "link", "set", inner, "netns", ns])
        run(["ip", "link", "set", outer, "master", self.bridge, "up"])
        for argv in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{addr}/24", "dev", inner],
            ["ip", "link", "set", inner, "up"],
        ):
            run(self.argv(host, argv))
        return addr

    def argv(self, host: str, argv: list[str]) -> list[str]:
        """argv run inside host's namespace."""
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def cut(self, host: str, peers: list[str]) -> None:
        """Silently drops host's traffic to and from peers (a black hole, not
        a refusal: no RST, no ICMP), as a failed switch or firewall would."""
        for peer in peers:
            addr = self.hosts[peer]
            run(self.argv(host, ["iptables", "-A", "OUTPUT", "-d", addr, "-j", "DROP"]))
            run(self.argv(host, ["iptables", "-A", "INPUT", "-s", addr, "-j", "DROP"]))

    def heal(self, host: str) -> None:
        for chain in ("OUTPUT", "INPUT"):
            run(self.argv(host, ["iptables", "-F", chain]))

    def pids(self, host: str) -> list[int]:
        res = run(["ip", "netns", "pids", self.ns(host)], check=False)
        return [int(p) for p in res.stdout.split() if p.isdigit()]

    def kill_all(self, host: str) -> int:
        """SIGKILL to every process in host's namespace: the host dies."""
        pids = self.pids(host)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def _wait_empty(self, host: str) -> None:
        """Up to 5 s for the killed processes to be gone."""
        for _ in range(50):
            if not self.pids(host):
                return
            time.sleep(0.1)

    def close(self) -> None:
        """Kills every process in the rig's namespaces, then removes them and
        the bridge (the veths go with their namespaces)."""
        for host in self.hosts:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.kill_all(host)
        for host in self.hosts:
            self._wait_empty(host)
            run(["ip", "netns", "del", self.ns(host)], check=False)
        for n in range(10, 10 + len(self.hosts)):
            # Normally gone with its peer's namespace; not if a process
            # still held the namespace.
            run(["ip", "link", "del", f"{self.tag}v{n}"], check=False)
        self.hosts.clear()
        if self._created_bridge:
            run(["ip", "link", "del", self.bridge], check=False)
            self._created_bridge = False
