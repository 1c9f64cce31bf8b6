"""Our handler for the PostgreSQL peers benchmark, and the start stamp every system's handler writes.

Principle: ``bench_postgres_peers.py`` measures add -> handler started by
having each system's handler write ``time.time()``, taken as its first
statement, to a file named in the job's data; the driver reads it back and
subtracts the time it called the enqueue. ``stamp`` writes the file
atomically (a temporary file renamed), so the driver never reads half of
it. Ours runs ``started`` (``otpjobs worker ... lat=peer_pg_tasks:started``);
the peers' handlers (``peer_pg_procrastinate``, ``peer_pg_pgqueuer``,
``peer_pg_oban``) call ``stamp`` the same way. The no-op and 10 ms handlers
of ours are ``peer_tasks.noop`` and ``peer_tasks.sleep10``, the SQLite
benchmark's.
"""

from __future__ import annotations

import os
import time
from typing import Any


def stamp(path: str) -> None:
    """Write the current ``time.time()`` to ``path`` (atomically)."""
    now = time.time()
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(repr(now))
    os.replace(tmp, path)


def read_stamp(path: str) -> float | None:
    """The time written by ``stamp`` to ``path``, or None if it is not there yet."""
    try:
        with open(path) as f:
            return float(f.read())
    except FileNotFoundError:
        return None


def started(ctx: Any) -> int:
    """Our handler: stamp the start time to ``ctx.data["path"]``; return 1."""
    stamp(ctx.data["path"])
    return 1
