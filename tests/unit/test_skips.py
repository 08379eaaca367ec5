"""tests/skips.py: the end-of-run summary of what was skipped and the one
install command, as pure functions."""

from __future__ import annotations

from tests import skips

CHROMIUM = "chromium is not installed (.ci/run installs it)"
NODE = "node/npm not installed"
RIG = "the cluster rig needs patroni, etcd (apt-get install patroni etcd-server iptables)"
ROOT = "the cluster rig needs root (ip netns add)"


def _which(*present: str) -> skips.Which:
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_grouped_by_reason_most_first_with_the_packages_missing_here() -> None:
    lines = skips.summary([NODE, CHROMIUM, CHROMIUM, RIG], _which("iptables"))
    assert lines == [
        "4 test(s) skipped here, by reason:",
        f"    2  {CHROMIUM}",
        f"    1  {NODE}",
        f"    1  {RIG}",
        "to run them too, install what they need (Debian/Ubuntu; .ci/run does it itself): "
        "sudo apt-get install -y chromium nodejs npm patroni etcd-server iptables",
    ]


def test_nothing_to_install_when_the_programs_are_there_or_not_the_cause() -> None:
    everything = _which("chromium", "node", "npm", "patroni", "etcd", "iptables")
    assert skips.summary([ROOT], everything, root=False) == [
        "1 test(s) skipped here, by reason:",
        f"    1  {ROOT}",
    ]
    assert skips.packages([CHROMIUM], _which("chromium-browser")) == []
    assert skips.summary([], everything) == []


def test_as_root_no_sudo_and_the_reason_from_a_skip_report() -> None:
    assert skips.summary([NODE], _which(), root=True)[-1].endswith(
        ": apt-get install -y nodejs npm"
    )
    assert skips.reason_of(("x.py", 3, f"Skipped: {NODE}")) == NODE
