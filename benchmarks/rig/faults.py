"""The four faults, each injected into a running rig while the producer
enqueues, then healed, the cluster made whole again and the queue drained
before the accounting (accounting.py) is done.

- kill_leader: SIGKILL to every process on the leader's host (Patroni and
  PostgreSQL); Patroni started again there after the observation window.
- switchover: a planned switchover through Patroni's REST API.
- partition_worker: w1 cut off from both databases (iptables DROP), healed
  after PARTITION_S.
- partition_leader: the leader cut off from etcd, so that Patroni demotes it;
  healed after PARTITION_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ..output import progress
from .accounting import account
from .rig import Rig

FAULTS = ("kill_leader", "switchover", "partition_worker", "partition_leader")
PARTITION_S = 20.0
# After a partition heals the producer keeps going at least this long, so a
# worker that reconnects within the SPEC's 10 s still finds work to deliver
# (with the queue drained by the other host there is nothing to see it by).
POST_HEAL_S = 12.0
DRAIN_LIMIT_S = 90.0
HEAL_LIMIT_S = 120.0


async def _inject(rig: Rig, fault: str, observe_s: float) -> dict[str, Any]:
    """Injects the fault and waits out observe_s (healing a partition after
    PARTITION_S); returns what the fault did."""
    leader = await rig.patroni.leader()
    if leader is None:
        raise RuntimeError("no leader before the fault")
    other = "db2" if leader == "db1" else "db1"
    t0 = time.monotonic()
    info: dict[str, Any] = {"leader": leader}
    if fault == "kill_leader":
        info["killed"] = rig.net.kill_all(leader)
    elif fault == "switchover":
        await rig.patroni.switchover(leader, other)
        info["switchover_s"] = round(time.monotonic() - t0, 2)
    elif fault in ("partition_worker", "partition_leader"):
        host, peers = ("w1", ["db1", "db2"]) if fault == "partition_worker" else (leader, ["etcd"])
        rig.net.cut(host, peers)
        # The cut host's rows stay in_flight in the database (it cannot
        # write their outcomes), so a count now holds every row it could
        # re-send, those claimed since the count before the fault too (one
        # more than that count was re-sent once in CI).
        with contextlib.suppress(OSError, TimeoutError):
            info["in_flight_at_cut"] = (await rig.queue_counts()).get("in_flight", 0)
        await asyncio.sleep(PARTITION_S)
        rig.net.heal(host)
        info["healed_at"] = time.time()
        observe_s = max(observe_s, PARTITION_S + POST_HEAL_S)
    else:
        raise ValueError(f"unknown fault {fault}")
    await asyncio.sleep(max(0.0, observe_s - (time.monotonic() - t0)))
    info["new_leader"] = await rig.patroni.leader()
    if fault == "kill_leader":
        rig.hosts.start_patroni(leader)  # the host comes back and rejoins
    return info


async def _drain(rig: Rig, ids: set[str]) -> float:
    """Waits until every acknowledged id arrived, or the queue has had
    nothing left to deliver for 3 s (what is missing then is lost)."""
    assert rig.timeline is not None
    t0 = time.monotonic()
    empty_since: float | None = None
    while time.monotonic() - t0 < DRAIN_LIMIT_S:
        if ids <= (await rig.timeline.arrivals()).keys():
            break
        try:
            left = sum((await rig.queue_counts()).values())
        except (OSError, TimeoutError) as exc:
            progress(f"rig: drain: queue not readable ({exc})")
            left = 1
        if left:
            empty_since = None
        elif empty_since is None:
            empty_since = time.monotonic()
        elif time.monotonic() - empty_since > 3:
            break
        await asyncio.sleep(0.5)
    return time.monotonic() - t0


async def run_fault(
    rig: Rig, fault: str, *, pre_s: float = 5.0, observe_s: float = 30.0
) -> dict[str, Any]:
    """One fault, measured; the cluster is healthy and drained afterwards."""
    assert rig.producer is not None and rig.timeline is not None
    progress(f"rig: {rig.mode}: {fault}")
    rig.producer.start(fault)
    await asyncio.sleep(pre_s)
    before = await rig.timeline.stats()
    in_flight = (await rig.queue_counts()).get("in_flight", 0)
    t_fault = time.time()
    info = await _inject(rig, fault, observe_s)
    in_flight = max(in_flight, info.pop("in_flight_at_cut", 0))
    until = time.time()
    rig.producer.check()
    await rig.producer.pause()
    heal_s = await rig.patroni.wait_healthy(rig.synchronous, HEAL_LIMIT_S)
    acked = rig.producer.acked_in(fault)
    drain_s = await _drain(rig, set(acked))
    arrivals = await rig.timeline.arrivals()
    after = await rig.timeline.stats()
    prefix = f"{fault}-"
    m = account(
        acked=acked,
        phase_ids={i for i in arrivals if i.startswith(prefix)},
        arrivals=arrivals,
        t_fault=t_fault,
        until=until,
        rate=rig.rate,
    )
    m.update(
        fault=fault,
        mode=rig.mode,
        in_flight_rows=in_flight,
        in_flight_http=before.get("open", 0),
        duplicates=after["duplicates"] - before["duplicates"],
        failed_enqueues=rig.producer.failed,
        cluster_whole_s=round(heal_s, 1),
        drain_s=round(drain_s, 1),
        **{k: v for k, v in info.items() if k != "healed_at"},
    )
    if fault == "partition_worker":
        w1, healed = rig.net.hosts["w1"], info["healed_at"]
        back = rig.timeline.peer_back_after(w1, healed)
        m["worker_back_after_heal_s"] = None if back is None else round(back, 2)
        # The partition held: w1 delivered nothing for most of it.
        m["worker_quiet_s"] = round(rig.timeline.peer_quiet_s(w1, t_fault, healed), 1)
    rig.producer.failed = 0
    progress(f"rig: {fault}: {m}")
    return m


async def run_mode(
    synchronous: bool,
    faults: tuple[str, ...],
    *,
    rate: int,
    latency_ms: float,
    observe_s: float = 30.0,
) -> list[dict[str, Any]]:
    """A fresh rig in one replication mode, the faults one after another."""
    async with Rig(synchronous=synchronous, rate=rate, latency_ms=latency_ms) as rig:
        return [await run_fault(rig, f, observe_s=observe_s) for f in faults]
