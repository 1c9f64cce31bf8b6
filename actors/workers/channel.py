"""The report channel from a worker to its dispatcher: a named pipe per worker.

Principle: what a worker did must outlive the worker. A worker writes a
record to its pipe *before* a handler starts (``START``) and right after
it returns or raises (``END``, with the outcome), and lists the runs it
hands back unstarted (``RELEASED``). A pipe keeps what was written after
the writer died, so when a worker is killed (SIGKILL, OOM, ``os._exit``)
its dispatcher reads every record it wrote and knows exactly which run
was in its handler (a ``START`` without an ``END``: that attempt is the
one that failed), which runs ended (their outcomes are kept) and which
never started (handed to another worker, their attempt not counted).
No message is lost in a transport queue of the dead process, and a write
is a system call, not a pickled actor message, so the channel is also the
fast path for outcomes.

The dispatcher makes the pipe (:class:`Channel`, mode 0600 in the private
runtime directory), holds its read end and one write end of its own (so a
read never sees end-of-file, even between workers), and unlinks its name
once the worker's first record arrives. The worker opens it by name
(:class:`Writer`). Records are ``kind (1 byte), token (int64), length
(uint32), payload``; a pipe has one writer process, whose two threads
write whole records under a lock.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import threading
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Optional

import msgpack

__all__ = [
    "START",
    "END",
    "RELEASED",
    "HELLO",
    "Record",
    "NamedPipe",
    "Channel",
    "Writer",
    "clear_stale",
    "stale_prefix",
]

log = logging.getLogger("otpjobs.workers")

START = ord("S")
END = ord("E")
RELEASED = ord("R")
HELLO = ord("H")

_HEADER = struct.Struct("<BqI")
_START = struct.Struct("<d")
#: Linux's F_SETPIPE_SZ: a larger pipe lets a worker run ahead of a busy dispatcher.
_F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20
_PREFIX = "ch-"


class Record(NamedTuple):
    """One record read from a channel.

    ``START``: ``value`` is the wall time the handler started. ``END``:
    ``value`` is ``(seconds, result bytes or None, error dict or None)``.
    ``RELEASED``: ``value`` is the tuple of tokens given back unstarted
    (``token`` is 0 when the dispatcher asked for them, 1 when the worker
    gave them back on its own: too late to start). ``HELLO``: the worker's first record, ``token`` its
    process id (so the dispatcher can watch the process itself).
    """

    kind: int
    token: int
    value: Any


class NamedPipe:
    """A pipe a dispatcher makes in ``directory`` for one worker (mode 0600,
    named so that :func:`clear_stale` removes it once the dispatcher is
    gone) and holds both ends of, non-blocking: a read never sees
    end-of-file and a write never fails for want of the worker's end. The
    report channel (:class:`Channel`) and the command pipe
    (:class:`~actors.workers.commands.CommandPipe`) are each one.

    Raises:
        OSError: the pipe cannot be made (the directory is not writable).
    """

    def __init__(self, directory: Path, name: str) -> None:
        self.path = Path(directory) / f"{stale_prefix()}{name}"
        os.mkfifo(self.path, 0o600)
        flags = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        self.read_end = os.open(self.path, os.O_RDONLY | flags)
        self.write_end = os.open(self.path, os.O_WRONLY | flags)
        try:
            fcntl.fcntl(self.read_end, _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # the system's limit is lower: the default size works, only slower
        self.closed = False
        self._named = True

    def unlink(self) -> None:
        """Remove the pipe's name (it stays usable through the open ends)."""
        if self._named:
            self._named = False
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Close both ends and remove the name (again: nothing)."""
        self.unlink()
        if self.closed:
            return
        self.closed = True
        for fd in (self.read_end, self.write_end):
            try:
                os.close(fd)
            except OSError:
                pass


class Channel(NamedPipe):
    """The dispatcher's end of one worker's report pipe (:class:`NamedPipe`): ``fd`` is read."""

    def __init__(self, directory: Path, name: str) -> None:
        super().__init__(directory, name)
        self.fd = self.read_end
        self._buf = bytearray()

    def read(self) -> list[Record]:
        """Every whole record written so far (a partial one waits for its rest)."""
        chunks = []
        while True:
            try:
                chunk = os.read(self.fd, PIPE_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        if chunks:
            self._buf += b"".join(chunks)
            if self._named:
                self.unlink()  # the worker has it open: no one else needs the name
        return list(self._parse())

    def _parse(self) -> Iterator[Record]:
        buf, pos, size = self._buf, 0, len(self._buf)
        while size - pos >= _HEADER.size:
            kind, token, length = _HEADER.unpack_from(buf, pos)
            end = pos + _HEADER.size + length
            if end > size:
                break
            payload = bytes(buf[pos + _HEADER.size : end])
            pos = end
            record = _decode(kind, token, payload)
            if record is not None:
                yield record
        del buf[:pos]


def _decode(kind: int, token: int, payload: bytes) -> Optional[Record]:
    try:
        if kind == START:
            return Record(kind, token, _START.unpack(payload)[0])
        if kind == END:
            seconds, result, error = msgpack.unpackb(payload, raw=False)
            return Record(kind, token, (float(seconds), result, error))
        if kind == RELEASED:
            return Record(kind, token, tuple(msgpack.unpackb(payload, raw=False)))
        if kind == HELLO:
            return Record(kind, token, None)
    except Exception as exc:  # noqa: BLE001 - a record this module did not write is skipped
        log.warning("channel_record_unreadable kind=%r token=%s error=%r", kind, token, exc)
        return None
    log.warning("channel_record_unknown kind=%r token=%s", kind, token)
    return None


class Writer:
    """A worker's end of its channel, opened by name.

    Writes never raise: once the dispatcher is gone (its successor will
    stop this worker) records are dropped and :attr:`broken` is True; a
    dropped start says so (the worker then starts no run: one started
    unrecorded would count no attempt, and the successor hands its job on).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.broken = False
        self._lock = threading.Lock()
        try:
            # Not blocking while it opens: a pipe nobody reads (its dispatcher died) is
            # refused (ENXIO) instead of holding this worker's actor until a reader
            # comes; then records are written whole, waiting for room.
            self._fd: Optional[int] = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            os.set_blocking(self._fd, True)
        except OSError as exc:
            log.warning("channel_unavailable path=%s error=%r", path, exc)
            self._fd, self.broken = None, True

    def hello(self) -> None:
        """Say which process writes here (the dispatcher watches it die)."""
        self._write(_HEADER.pack(HELLO, os.getpid(), 0))

    def start(self, token: int, wall: float) -> bool:
        """Record that the run of ``token`` is about to call its handler;
        False when it could not be (the channel is closed or its reader, the
        dispatcher, is gone): then the handler must not be called."""
        return self._write(_HEADER.pack(START, token, _START.size) + _START.pack(wall))

    def end(self, token: int, seconds: float, result: Optional[bytes], error: Optional[dict]) -> None:
        """Record the end of the run of ``token``: its result or its error."""
        payload = msgpack.packb((seconds, result, error), use_bin_type=True, default=str)
        self._write(_HEADER.pack(END, token, len(payload)) + payload)

    def released(self, tokens: tuple, late: bool = False) -> None:
        """Record the runs handed back without starting them (``late``: not
        asked for, their time to start had passed)."""
        payload = msgpack.packb(list(tokens))
        self._write(_HEADER.pack(RELEASED, int(late), len(payload)) + payload)

    def _write(self, data: bytes) -> bool:
        """Write one record whole; False when it was dropped."""
        with self._lock:
            if self._fd is None:
                return False
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError as exc:
                if exc.errno not in (errno.EPIPE, errno.EBADF):
                    log.warning("channel_write_failed path=%s error=%r", self.path, exc)
                self.broken = True
                self.close_locked()
                return False
            return True

    def close_locked(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def close(self) -> None:
        """Close this end (records written so far stay readable)."""
        with self._lock:
            self.close_locked()


def stale_prefix() -> str:
    """The start of the name of a pipe this process makes: :func:`clear_stale`
    removes it once the process is gone."""
    return f"{_PREFIX}{os.getpid()}-"


def clear_stale(directory: Path) -> int:
    """Remove pipe names left by dispatchers that died before unlinking them
    (their process is gone); returns how many."""
    from supervision.procs import pid_alive

    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        pid = name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            try:
                os.unlink(Path(directory) / name)
                removed += 1
            except OSError:
                pass
    return removed
