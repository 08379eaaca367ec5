"""The scenarios, each a module on top of the shared machinery (bench.py,
phases.py): `RUNNERS` maps the names `dispatcher bench` accepts, in the order
`all` runs them, to their runners. `cluster` (root, Patroni and etcd: it
builds its own hosts and database cluster), `history` (minutes of filling
first) and `instructions` (the worker under valgrind) are named alone, never
by `all`."""

from __future__ import annotations

from ..bench import Runner
from .cluster import run_cluster
from .fast import run_fast
from .faults import run_faults
from .fifo import run_fifo
from .filters import run_filters
from .held import run_held
from .history import run_history
from .https import run_https
from .instructions import run_instructions
from .internet import run_internet
from .jobqueue import run_jobqueue
from .many import run_many
from .noisy import run_noisy
from .processes import run_processes
from .producers import run_producers
from .slow import run_slow200, run_slow500, run_slowmix
from .tenants import run_tenants
from .tracing import run_tracing
from .two import run_two
from .wake import run_wake

RUNNERS: dict[str, Runner] = {
    "fast": run_fast,
    "slow200": run_slow200,
    "slow500": run_slow500,
    "slowmix": run_slowmix,
    "many": run_many,
    "noisy": run_noisy,
    "two": run_two,
    "processes": run_processes,
    "wake": run_wake,
    "faults": run_faults,
    "producers": run_producers,
    "internet": run_internet,
    "fifo": run_fifo,
    "filters": run_filters,
    "https": run_https,
    "tracing": run_tracing,
    "tenants": run_tenants,
    "jobqueue": run_jobqueue,
    "held": run_held,
    "history": run_history,
    "instructions": run_instructions,
    "cluster": run_cluster,
}
# Scenarios that bring their own database (and need root): `all` skips
# them and the harness does not resolve DATABASE_URL for them.
OWN_DATABASE = frozenset({"cluster"})
# Named alone too: `history` fills ten million rows of each kind first;
# `instructions` runs the worker under callgrind.
NOT_IN_ALL = OWN_DATABASE | {"history", "instructions"}

__all__ = ["NOT_IN_ALL", "OWN_DATABASE", "RUNNERS"]
