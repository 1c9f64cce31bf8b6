"""The public API of the job queue and its worker pools: import this module.

It re-exports :mod:`actors.queue.client` (the seed's couch_jobs calls and
subscriptions) and :mod:`actors.workers.client` (``enqueue``, ``result``,
``status``, ``schedule``, ``unschedule``, ``schedules``, ``pause``,
``resume``, ``prune`` and ``JobFailed``), and what a handler uses from
:mod:`actors.workers.control` (``Retry``, ``Snooze``, ``Cancel``, the
``handler`` decorator). See there for every call.
"""

from actors.queue.client import *  # noqa: F401,F403
from actors.queue.client import __all__ as _queue_all
from actors.workers.client import (  # noqa: F401
    JobFailed,
    JobStatus,
    enqueue,
    pause,
    prune,
    result,
    resume,
    schedule,
    schedules,
    status,
    unschedule,
)
from actors.workers.control import Cancel, Retry, Snooze, handler  # noqa: F401

__all__ = list(_queue_all) + [
    "JobFailed",
    "JobStatus",
    "enqueue",
    "result",
    "schedule",
    "schedules",
    "status",
    "unschedule",
    "pause",
    "resume",
    "prune",
    "Retry",
    "Snooze",
    "Cancel",
    "handler",
]
