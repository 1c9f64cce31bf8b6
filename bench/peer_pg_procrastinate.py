"""The procrastinate app of the PostgreSQL peers benchmark.

Principle: the worker command (``procrastinate --app
peer_pg_procrastinate.app worker --concurrency N``) and the driver import
this same app, so they share its tasks. Its connector is procrastinate's
asynchronous ``PsycopgConnector`` on the database named by
``PEER_PG_URL`` (a libpq URL), which the driver sets for the worker; the
driver itself defers through the same app with a ``SyncPsycopgConnector``
swapped in by ``App.replace_connector`` (a synchronous producer, as a
web request is). Tasks are ``async def`` (procrastinate runs a synchronous
task in a thread). Everything else is procrastinate's default: queue
``default``, jobs kept in ``procrastinate_jobs`` with status ``succeeded``
(the driver's completion count), LISTEN/NOTIFY on.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

import peer_pg_tasks

ENV_URL = "PEER_PG_URL"

app = App(connector=PsycopgConnector(conninfo=os.environ.get(ENV_URL, "")))


@app.task(name="noop")
async def noop() -> int:
    """Nothing; return 1."""
    return 1


@app.task(name="started")
async def started(path: str) -> int:
    """Stamp the start time to ``path``; return 1."""
    peer_pg_tasks.stamp(path)
    return 1
