"""The command pipe from a dispatcher to one of its workers: a named pipe per worker.

Principle: a dispatcher tells a worker what to run (``RunJobs``) and what
to stop or hand back (``StopJob``, ``TakeBack``, ``Release``) through a pipe,
not through Thespian. A Thespian message from one actor to another took
0.6 ms at the median and 2 ms at the 90th percentile on the test machine,
and comes with an acknowledgement the sender must read back; a write to a
pipe is one system call, read by the worker's actor in the same turn of
its loop that wakes it. Every command goes through the pipe, so commands
arrive in the order they were sent (a stop never overtakes the run it
stops). The one Thespian message is the pipe's name (``UsePipe``), sent
once when the dispatcher adopts the worker: commands written before the
worker opens the pipe wait in it.

The dispatcher makes the pipe (:class:`CommandPipe`, mode 0600 in the
private runtime directory, named like the report channels so that
``channel.clear_stale`` removes a dead dispatcher's), holds a read end it
never reads (so a write never fails because the worker has not opened
the pipe yet, or has died), and unlinks the name once the worker has
opened it (its first record on the report channel says so). The worker
opens it by name (:class:`CommandReader`). Frames are ``length (uint32),
pickle``: the same objects Thespian pickled, between processes of one
user.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import struct
import time
from typing import Any

from actors.workers.channel import PIPE_SIZE, NamedPipe

__all__ = ["CommandPipe", "CommandReader", "FULL_WAIT"]

log = logging.getLogger("otpjobs.workers")

_LENGTH = struct.Struct("<I")
#: How long a write waits for room in a full pipe (its worker reads
#: nothing: stopped, or its actor wedged) before the write gives up.
FULL_WAIT = 1.0


class CommandPipe(NamedPipe):
    """The dispatcher's end of one worker's command pipe (:class:`~actors.workers.channel.NamedPipe`): written."""

    def send(self, msg: Any, wait: float = FULL_WAIT) -> bool:
        """Write one command whole; False when it could not be (the pipe
        stayed full for ``wait`` seconds, or is closed): a frame may then be
        cut short, so the worker must be replaced, never written to again."""
        if self.closed:
            return False
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_LENGTH.pack(len(data)) + data)
        deadline, poller = None, None
        while view:
            try:
                view = view[os.write(self.write_end, view) :]
            except BlockingIOError:
                now = time.monotonic()
                deadline = now + wait if deadline is None else deadline
                if now >= deadline:
                    return False
                if poller is None:  # poll, not select: a host of many workers has descriptors past 1024
                    poller = select.poll()
                    poller.register(self.write_end, select.POLLOUT)
                poller.poll((deadline - now) * 1000)
            except OSError as exc:
                log.warning("command_write_failed path=%s error=%r", self.path, exc)
                return False
        return True


class CommandReader:
    """A worker's end of its command pipe, opened by name.

    Raises:
        OSError: the pipe cannot be opened (its name is gone).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        #: True once every writer has closed (the dispatcher is gone): nothing more will come.
        self.ended = False
        self._buf = bytearray()

    def read(self) -> list:
        """Every whole command written so far, in order (a partial one waits for its rest)."""
        while True:
            try:
                chunk = os.read(self.fd, PIPE_SIZE)
            except BlockingIOError:
                break
            if not chunk:
                self.ended = True
                break
            self._buf += chunk
        return self._parse()

    def _parse(self) -> list:
        buf, pos, size, out = self._buf, 0, len(self._buf), []
        while size - pos >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buf, pos)
            end = pos + _LENGTH.size + length
            if end > size:
                break
            try:
                out.append(pickle.loads(buf[pos + _LENGTH.size : end]))
            except Exception as exc:  # noqa: BLE001 - a frame this module did not write is skipped
                log.warning("command_unreadable path=%s error=%r", self.path, exc)
            pos = end
        del buf[:pos]
        return out

    def close(self) -> None:
        """Close this end."""
        try:
            os.close(self.fd)
        except OSError:
            pass
