"""The names every data-access module shares, below the package: the
connection type and the advisory lock ids. A module of its own so that the
migration runner (migrator.py), which the package re-exports, imports it
rather than the package that imports the runner."""

from __future__ import annotations

import asyncpg
from asyncpg.pool import PoolConnectionProxy

# What every query function takes: a plain connection or one from a pool.
Conn = asyncpg.Connection | PoolConnectionProxy

MIGRATION_LOCK = 0x6469737061746368  # "dispatch"
MAINTENANCE_LOCK = MIGRATION_LOCK + 1
