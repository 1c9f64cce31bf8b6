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

A write of at most ``PIPE_BUF`` (4,096) bytes to a pipe is atomic, a longer
one is not: another process's line may land inside it. So where a stream
is not a regular file (a pipe, a terminal, a socket), each process writes
through :class:`WholeLines`, which takes a lock shared by the node's
processes (``lockf`` on a file they all inherit): shared for a short
record, exclusive for a long one (a traceback).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging.config
import os
import stat
import tempfile
from typing import Any, Iterator, Optional

from thespian.system import logdirector
from thespian.system.logdirector import ThespianLogForwardHandler

__all__ = ["inherited", "log_directly", "WholeLines"]

#: The node's logging config while its first process is forked: every
#: process of the node inherits it (None: the node logs through Thespian).
_config: Optional[dict[str, Any]] = None
_applied_in: Optional[int] = None  # the pid that applied it (a fork must apply it again)
#: The descriptor of the node's line lock (an unlinked file every process of
#: the node inherits), while its first process is forked; -1 outside.
_lock_fd = -1


@contextlib.contextmanager
def inherited(config: Optional[dict[str, Any]]) -> Iterator[None]:
    """Around the start of a node's first process: the processes forked
    meanwhile, and their own forks, log with ``config`` (a
    ``logging.config.dictConfig`` dict) once they call :func:`log_directly`,
    sharing one line lock (:class:`WholeLines`)."""
    global _config, _lock_fd
    lock_fd = _open_lock() if config is not None else -1
    before = _config, _lock_fd
    _config, _lock_fd = config, lock_fd
    try:
        yield
    finally:
        _config, _lock_fd = before
        if lock_fd >= 0:
            os.close(lock_fd)  # the forked processes hold their own copies


def _open_lock() -> int:
    """A descriptor of a new unlinked file (inherited across forks), or -1."""
    try:
        fd, path = tempfile.mkstemp(prefix="otpjobs-log-lock-")
    except OSError:
        return -1  # no lock: long lines may be split, as before
    os.unlink(path)
    return fd


class WholeLines:
    """A text stream that several processes write log records to, each
    record whole: under the node's line lock, shared for a record that
    fits in one atomic pipe write, exclusive for a longer one (so no
    shorter one lands inside it). ``lockf`` locks belong to a process, so
    every process of the node locks the same inherited descriptor
    independently; a failed lock call writes unlocked."""

    #: Characters that always fit in ``PIPE_BUF`` bytes (UTF-8: at most 4 a character).
    SHORT = 4096 // 4

    def __init__(self, stream: Any, lock_fd: int) -> None:
        self.stream = stream
        self.lock_fd = lock_fd

    def write(self, text: str) -> int:
        """Write ``text`` and flush it, under the lock."""
        short = len(text) <= self.SHORT or len(text.encode("utf-8", "replace")) <= 4096
        try:
            fcntl.lockf(self.lock_fd, fcntl.LOCK_SH if short else fcntl.LOCK_EX)
        except OSError:
            return self._write(text)
        try:
            return self._write(text)
        finally:
            try:
                fcntl.lockf(self.lock_fd, fcntl.LOCK_UN)
            except OSError:
                pass

    def _write(self, text: str) -> int:
        written = self.stream.write(text)
        self.stream.flush()
        return written if isinstance(written, int) else len(text)

    def flush(self) -> None:
        """Nothing left to flush: every write flushed."""


def _whole_lines(root: logging.Logger, manager: logging.Manager) -> None:
    """Every stream handler of the hierarchy whose stream is not a regular
    file writes through :class:`WholeLines` (when the node has a lock)."""
    if _lock_fd < 0:
        return
    loggers = [root] + [lg for lg in manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    for handler in {h for lg in loggers for h in lg.handlers}:
        if type(handler) is logging.StreamHandler and not _regular(handler.stream):
            handler.stream = WholeLines(handler.stream, _lock_fd)


def _regular(stream: Any) -> bool:
    """Whether ``stream`` writes to a regular file (one write is one whole record there)."""
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return True  # no descriptor to share: nothing to lock


#: Thespian's own forwarding, which a process that cannot log here keeps.
_FORWARD = ThespianLogForwardHandler.handle

#: Handlers that several processes may each open on one destination: a
#: stream (the inherited stderr, written a line at a time) or a file
#: appended to. Any other (a rotating file, a socket, a class of the
#: user's) keeps the node on Thespian's logger, its single writer.
SHARED_HANDLERS = {
    "logging.StreamHandler",
    "logging.FileHandler",
    "logging.NullHandler",
    "logging.handlers.WatchedFileHandler",
}


def log_directly() -> None:
    """In a node's forked process, handle log records here with the node's
    config instead of sending them to Thespian's logger (once per process;
    nothing outside a node, or with a config whose handlers are not all
    :data:`SHARED_HANDLERS`). A config that cannot be applied here (a file
    it cannot open) leaves the process on Thespian's logger, with a
    warning: it never stops an actor from starting.

    Every logger of the process ends at a root that Thespian made a
    forwarder (loggers made before a fork hang from an older one), so the
    forwarder's handler is what changes: it hands each record to a private
    hierarchy configured as the logger process is, as that process would
    (by the record's logger name), prepared as the forwarder prepared it
    (``actorAddress`` set; arguments that cannot be formatted written as
    ``<un-str-able ...>``, never a lost line)."""
    global _applied_in
    if _config is None or _applied_in == os.getpid():
        return
    _applied_in = os.getpid()
    ThespianLogForwardHandler.handle = _FORWARD  # not the parent process's hierarchy, inherited by the fork
    config = _shared(_config)
    if config is None:
        return
    try:
        root, manager = _private_hierarchy(config)
    except Exception as exc:  # noqa: BLE001 - logging must not stop an actor: the logger process still works
        logging.getLogger(__name__).warning("log_direct_failed reason=%r: through the node's logger", exc)
        return
    _whole_lines(root, manager)

    def handle_here(self: ThespianLogForwardHandler, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return False
        try:
            _prepare(record)
            (root if record.name == "root" else manager.getLogger(record.name)).handle(record)
        except Exception:  # noqa: BLE001 - a handler that fails here: the logger process writes it
            return bool(_FORWARD(self, record))
        return True

    ThespianLogForwardHandler.handle = handle_here


def _shared(config: dict[str, Any]) -> Optional[dict[str, Any]]:
    """``config`` for one more process of the node (files appended to, not
    truncated again), or None if a handler may not be opened twice."""
    handlers = {}
    for name, spec in (config.get("handlers") or {}).items():
        cls = spec.get("class")
        if not isinstance(cls, str) or cls not in SHARED_HANDLERS:
            return None
        handlers[name] = dict(spec, mode="a") if "filename" in spec else spec
    return dict(config, handlers=handlers)


def _private_hierarchy(config: dict[str, Any]) -> tuple[logging.RootLogger, logging.Manager]:
    """A root logger and its manager configured by ``config``, apart from
    the process's own (``dictConfig`` configures logging's module globals,
    swapped meanwhile: a new actor process runs only this thread)."""
    root = logging.RootLogger(logging.WARNING)
    manager = logging.Manager(root)
    saved = logging.root, logging.Logger.manager
    logging.root = logging.Logger.root = root
    logging.Logger.manager = manager
    try:
        logging.config.dictConfig(config)
    finally:
        logging.root = logging.Logger.root = saved[0]
        logging.Logger.manager = saved[1]
    return root, manager


def _prepare(record: logging.LogRecord) -> None:
    """What Thespian's forwarder did to a record before its logger process
    handled it: the actor's address, and a message that formats."""
    transport = getattr(logdirector, "logTransport", None)
    record.__dict__.setdefault("actorAddress", str(getattr(transport, "myAddress", "")))
    try:
        record.msg = record.getMessage()
    except Exception:  # noqa: BLE001 - as the forwarder: the arguments as text, else a placeholder
        record.args = tuple(_text(arg) for arg in (record.args or ()))
        try:
            record.msg = record.getMessage()
        except Exception:  # noqa: BLE001
            record.msg = "<un-str-able message>"
    record.args = None


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001
        return "<un-str-able argument>"
