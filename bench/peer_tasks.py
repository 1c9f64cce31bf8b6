"""The job handlers that the peers' workers run in the worker-throughput benchmark.

Principle: every peer (Huey, RQ, Celery) runs exactly these plain functions,
so the figures differ only by what each peer does around a job. Each handler
takes no argument (or one, ignored) and returns ``1``: a small value, so that
every peer stores a result for every job (Huey stores no result for a task
that returns None), which is the completion record the driver counts.

* ``noop``: nothing; the figure is the peer's own per-job cost.
* ``sleep10``: ``time.sleep(0.010)``; I/O-like wait that releases the GIL.
* ``cpu5``: a pure-Python busy loop until the calling thread has used 5 ms
  of CPU (``time.thread_time``, so it is 5 ms of this job's CPU even when
  worker threads share a process).

The peers' workers import this module as ``peer_tasks`` (bench/ on their
path); ``peer_huey_app`` and ``peer_celery_app`` register these functions as
Huey and Celery tasks, and RQ enqueues them by name (``peer_tasks.noop``).
"""

from __future__ import annotations

import time

#: CPU seconds that ``cpu5`` burns.
CPU_SECONDS = 0.005

#: Seconds that ``sleep10`` sleeps.
SLEEP_SECONDS = 0.010


def noop(_ignored=None) -> int:
    """Do nothing; return 1."""
    return 1


def sleep10(_ignored=None) -> int:
    """Sleep 10 ms (releases the GIL, like waiting on I/O); return 1."""
    time.sleep(SLEEP_SECONDS)
    return 1


def cpu5(_ignored=None) -> int:
    """Busy-loop in pure Python until this thread used 5 ms of CPU; return 1."""
    end = time.thread_time() + CPU_SECONDS
    x = 0
    while time.thread_time() < end:
        for i in range(100):
            x += i
    return 1


#: Handler name -> function, the names the benchmark's callers use.
HANDLERS = {"noop": noop, "sleep10": sleep10, "cpu5": cpu5}
