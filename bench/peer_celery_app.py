"""The Celery app of the worker-throughput benchmark: ``peer_tasks`` as Celery tasks.

Principle: the driver (``worker_peers``) and the ``celery worker``
processes it starts build the app with the same settings; the worker loads
``peer_celery_app.app``, built on first access from the environment the
driver sets:

* ``PEER_CELERY_BROKER``: the broker URL (``redis://127.0.0.1:<port>/0``);
* ``PEER_CELERY_BACKEND``: the result backend URL
  (``redis://127.0.0.1:<port>/1``), or empty for none.

Settings (the rest is Celery's default): ``task_acks_late=True`` (a message
is acknowledged after its task ran, so a worker killed mid-task does not
lose it: the fair match for a durable queue), ``worker_prefetch_multiplier``
4 (the default), JSON serialisation, results kept one hour. The tasks are
named ``peer.<handler>``.

The driver enqueues through an app with no result backend, as a
fire-and-forget producer does: with a Redis backend configured, Celery's
``send_task`` SUBSCRIBEs the producer to every task's result channel. The
workers' app has the backend, so each task still stores its result
(``celery-task-meta-<id>`` in Redis db 1), which the driver counts with
``DBSIZE``.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from celery import Celery

import peer_tasks

ENV_BROKER = "PEER_CELERY_BROKER"
ENV_BACKEND = "PEER_CELERY_BACKEND"

#: Handler name -> Celery task name.
TASK_NAMES = {name: f"peer.{name}" for name in peer_tasks.HANDLERS}


def make_celery(broker: str, backend: Optional[str] = None) -> Celery:
    """A Celery app on ``broker`` storing results in ``backend`` (None: no results)."""
    app = Celery("peer_celery_app", broker=broker, backend=backend or None)
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=4,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=True,
    )
    for name, func in peer_tasks.HANDLERS.items():
        app.task(name=TASK_NAMES[name])(func)
    return app


def __getattr__(name: str) -> Any:
    """``app``: the app built from the environment, on first access."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    broker = os.environ.get(ENV_BROKER)
    if not broker:
        raise RuntimeError(f"{ENV_BROKER} is not set: the driver sets it to the broker's URL")
    app = make_celery(broker, os.environ.get(ENV_BACKEND) or None)
    globals()["app"] = app
    return app
