"""A worker host's supervision tree: the pool, then the dispatcher (rest_for_one).

The pool is a simple_one_for_one supervisor of permanent workers, so a
worker that dies is restarted at once; the dispatcher starts them and
adopts the restarted ones. A dispatcher crash restarts only the
dispatcher, which clears the pool, takes back the jobs its predecessor
held (by the host's name) and starts the pool afresh; a pool crash
restarts both.
"""

from __future__ import annotations

from typing import Any

from supervision import ChildSpec, ChildType, Restart, Strategy, Supervisor, SupFlags

from actors import names
from actors.workers.dispatcher import Dispatcher
from actors.workers.worker import Worker

__all__ = ["WorkerPool", "WorkersSup", "workers_children"]


class WorkerPool(Supervisor):
    """simple_one_for_one of :class:`~actors.workers.worker.Worker`."""

    def children(self, args: Any) -> tuple:
        # A worker dies with the job that killed it (its attempt fails, and max_attempts
        # bounds it), so poison jobs among many must not take the pool down.
        flags = SupFlags(Strategy.SIMPLE_ONE_FOR_ONE, intensity=max(50, 10 * int(args or 1)), period=10)
        return flags, [ChildSpec("worker", Worker, None, restart=Restart.PERMANENT, shutdown="brutal_kill")]


class WorkersSup(Supervisor):
    """rest_for_one: the pool, then the dispatcher. args: the dispatcher's."""

    def children(self, args: Any) -> tuple:
        flags = SupFlags(Strategy.REST_FOR_ONE, intensity=5, period=10)
        return flags, [
            ChildSpec(
                "worker_pool", WorkerPool, args["concurrency"], type=ChildType.SUPERVISOR, name=names.WORKER_POOL
            ),
            ChildSpec(
                "dispatcher", Dispatcher, dict(args, pool=names.WORKER_POOL), shutdown=5.0, name=names.WORKER_DISPATCHER
            ),
        ]


def workers_children(args: dict) -> list[ChildSpec]:
    """The worker host as a node root child: ``[ChildSpec(workers_sup)]``."""
    return [ChildSpec("workers_sup", WorkersSup, args, type=ChildType.SUPERVISOR, name=names.WORKERS_SUP)]
