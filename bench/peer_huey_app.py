"""The Huey app of the worker-throughput benchmark: ``peer_tasks`` as Huey tasks.

Principle: the driver (``worker_peers``) and the ``huey_consumer`` processes
it starts build the same app from the same two settings, so they share one
SQLite file and one task registry. The consumer loads ``peer_huey_app.huey``,
which is built on first access from the environment the driver sets:

* ``PEER_HUEY_DB``: path of the SQLite file (required);
* ``PEER_HUEY_DURABILITY``: ``FULL`` = Huey's ``SqliteHuey(fsync=True)``
  (``PRAGMA synchronous=FULL``), or ``NORMAL`` = a ``SqliteHuey`` whose
  storage sets ``PRAGMA synchronous=NORMAL`` (Huey itself offers only OFF
  or FULL). Both keep Huey's default ``journal_mode=wal``.

Everything else is Huey's default: results stored (each handler returns 1,
so every job leaves one row in Huey's result store, which the driver
counts), pickle serialisation, no compression. Importing this module has
no side effect; the app is made by ``make_huey`` or on first access to
``huey``.
"""

from __future__ import annotations

import os
from typing import Any

from huey import SqliteHuey
from huey.storage import SqliteStorage

import peer_tasks

ENV_DB = "PEER_HUEY_DB"
ENV_DURABILITY = "PEER_HUEY_DURABILITY"

#: Huey's queue name (the ``queue`` column of its tables).
NAME = "peer-bench"

#: PRAGMA synchronous level each durability must run at.
SYNCHRONOUS = {"FULL": 2, "NORMAL": 1}


class NormalSqliteStorage(SqliteStorage):
    """Huey's SQLite storage at ``synchronous=NORMAL`` in WAL mode."""

    def _create_connection(self):
        """Huey's connection (WAL, cache size), then ``synchronous=NORMAL``."""
        conn = super()._create_connection()
        conn.execute("pragma synchronous=NORMAL")
        return conn


class NormalSqliteHuey(SqliteHuey):
    """``SqliteHuey`` storing through ``NormalSqliteStorage``."""

    storage_class = NormalSqliteStorage


def make_huey(path: str, durability: str) -> tuple[Any, dict[str, Any]]:
    """(Huey app on ``path`` at ``durability``, {handler name: Huey task})."""
    if durability == "FULL":
        app = SqliteHuey(NAME, filename=path, fsync=True, journal_mode="wal")
    elif durability == "NORMAL":
        app = NormalSqliteHuey(NAME, filename=path, journal_mode="wal")
    else:
        raise ValueError(f"durability must be FULL or NORMAL, not {durability!r}")
    tasks = {name: app.task()(func) for name, func in peer_tasks.HANDLERS.items()}
    return app, tasks


def storage_pragmas(app: Any) -> tuple[int, str]:
    """(synchronous level, journal mode) of ``app``'s storage connection."""
    conn = app.storage.conn
    (level,) = conn.execute("pragma synchronous").fetchone()
    (mode,) = conn.execute("pragma journal_mode").fetchone()
    return level, mode


def __getattr__(name: str) -> Any:
    """``huey`` (and ``tasks``): the app built from the environment, on first access."""
    if name not in ("huey", "tasks"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    path = os.environ.get(ENV_DB)
    if not path:
        raise RuntimeError(f"{ENV_DB} is not set: the driver sets it to the SQLite file's path")
    app, tasks = make_huey(path, os.environ.get(ENV_DURABILITY, "FULL"))
    globals().update(huey=app, tasks=tasks)
    return globals()[name]
