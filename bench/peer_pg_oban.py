"""The oban-py workers of the PostgreSQL peers benchmark.

Principle: ``oban start --dsn URL --queues default:N`` runs jobs whose
``worker`` column names a class of this module (oban imports it by that
name: bench/ is on the worker's PYTHONPATH); the driver enqueues through
an ``Oban`` instance in client mode (no queues) on a psycopg pool. Both
workers are ``async def process`` (oban's protocol). Completed jobs stay in
``oban_jobs`` with state ``completed`` (pruned after a day by default): the
driver's completion count.
"""

from __future__ import annotations

from oban import worker

import peer_pg_tasks


@worker(queue="default")
class Noop:
    """Nothing."""

    async def process(self, job):  # noqa: D102
        return None


@worker(queue="default")
class Started:
    """Stamp the start time to ``job.args["path"]``."""

    async def process(self, job):  # noqa: D102
        peer_pg_tasks.stamp(job.args["path"])
        return None
