"""The pgqueuer worker factory of the PostgreSQL peers benchmark (``pgq run peer_pg_pgqueuer:factory``).

Principle: pgqueuer 1.6's ``pgq run`` takes a factory returning an async
context manager that yields a ``PgQueuer``; this one opens one asyncpg
connection (pgqueuer's documented driver) to ``PEER_PG_URL`` and registers
two ``async def`` entrypoints, ``noop`` and ``started`` (the payload is the
stamp file's path), both with ``concurrency_limit`` from
``PEER_PGQ_LIMIT``: N for a run "with N workers" (the driver then also
passes ``--batch-size N``, see ``pg_peers``), 0 for pgqueuer's default
(unlimited: as many jobs at once as its batches bring, 10 a dequeue by
default). pgqueuer enforces the limit in its dequeue query. Completed
jobs leave the ``pgqueuer`` table and are logged in ``pgqueuer_log`` with
status ``successful`` (the driver's completion count).
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import AsyncIterator

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job

import peer_pg_tasks

ENV_URL = "PEER_PG_URL"
ENV_LIMIT = "PEER_PGQ_LIMIT"


@asynccontextmanager
async def factory() -> AsyncIterator[PgQueuer]:
    """A PgQueuer on one asyncpg connection, with the benchmark's entrypoints."""
    connection = await asyncpg.connect(os.environ[ENV_URL])
    try:
        pgq = PgQueuer(AsyncpgDriver(connection))
        limit = int(os.environ.get(ENV_LIMIT, "0"))

        @pgq.entrypoint("noop", concurrency_limit=limit)
        async def noop(job: Job) -> None:
            return None

        @pgq.entrypoint("started", concurrency_limit=limit)
        async def started(job: Job) -> None:
            peer_pg_tasks.stamp(job.payload.decode())

        yield pgq
    finally:
        await connection.close()
