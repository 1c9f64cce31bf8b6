"""Each process of a node writes its own log lines.

Principle: Thespian forwards every log record of an actor to the node's
logger process as one message on the actor's transport. A burst of records
(a pool's thousand failed jobs, a thousand leases re-enqueued) fills the
transport's queue (950 sends) and blocks the actor until the logger has
drained it: measured, a pool whose jobs all failed drained 1,000 jobs/s
where it drains 5,300 with the same failures unlogged. The processes of a
node are forked from its starter and share its stderr, so each applies the
node's logging config itself (:func:`log_directly`, in a new actor
process) and writes whole lines there, each in one write, stamped with its
own pid; the logger process keeps what comes before (an actor's records
before it ran :func:`log_directly`, the admin's).
"""

from __future__ import annotations

import contextlib
import logging.config
import os
from typing import Any, Iterator, Optional

from thespian.system.logdirector import ThespianLogForwardHandler

__all__ = ["inherited", "log_directly"]

#: The node's logging config while its first process is forked: every
#: process of the node inherits it (None: the node logs through Thespian).
_config: Optional[dict[str, Any]] = None
_applied_in: Optional[int] = None  # the pid that applied it (a fork must apply it again)


@contextlib.contextmanager
def inherited(config: Optional[dict[str, Any]]) -> Iterator[None]:
    """Around the start of a node's first process: the processes forked
    meanwhile, and their own forks, log with ``config`` (a
    ``logging.config.dictConfig`` dict) once they call :func:`log_directly`."""
    global _config
    before, _config = _config, config
    try:
        yield
    finally:
        _config = before


def log_directly() -> None:
    """In a node's forked process, handle log records here with the node's
    config instead of sending them to Thespian's logger (once per process;
    nothing outside a node).

    Every logger of the process ends at a root that Thespian made a
    forwarder (loggers made before a fork hang from an older one), so the
    forwarder's handler is what changes: it hands each record to a private
    hierarchy configured as the logger process is, as that process would
    (by the record's logger name)."""
    global _applied_in
    if _config is None or _applied_in == os.getpid():
        return
    _applied_in = os.getpid()
    root = logging.RootLogger(logging.WARNING)
    manager = logging.Manager(root)
    saved = logging.root, logging.Logger.manager
    logging.root = logging.Logger.root = root  # dictConfig configures the module's globals
    logging.Logger.manager = manager
    try:
        logging.config.dictConfig(_config)
    finally:
        logging.root = logging.Logger.root = saved[0]
        logging.Logger.manager = saved[1]

    def handle_here(self: ThespianLogForwardHandler, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return False
        (root if record.name == "root" else manager.getLogger(record.name)).handle(record)
        return True

    ThespianLogForwardHandler.handle = handle_here
