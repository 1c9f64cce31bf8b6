"""The workers' journal of ended runs: what a handler returned outlives a
dispatcher that dies before writing it.

Principle: a worker reports each run's end on its channel
(:mod:`actors.workers.channel`), and its dispatcher writes the outcome to
the store with its next step, milliseconds later. A dispatcher killed in
between (SIGKILL, OOM) takes the ends it had read, or not yet read, with
it: its successor would find those jobs held, their handlers perhaps
started, and put them back (``WorkerLost`` counted, or run again) though
their handlers had returned. So a worker also appends each end to a file
of its own (:class:`JournalWriter`: one ``write`` of a few dozen bytes
beside the channel's, no fsync: a process dies, not the machine), and the
dispatcher's successor, once its predecessor's workers are gone and
before it takes back what they held, reads those files
(:func:`collect`) and ends the jobs as their handlers did. The store
decides what still counts: an end is written only for a job still held
under the lock its run had (:func:`fdblayer.jobs.work.complete`); one the
predecessor had written, or whose job moved on, is dropped.

Files are ``jr-<host key>-<worker pid>-<generation>`` in the private
runtime directory (mode 0600). A worker starts a new generation once the
last holds :data:`ROTATE_RECORDS` records and :data:`ROTATE_BYTES` bytes,
and removes the one before the last: it keeps its last few hundred ends
(twice a worker's largest prefetch: far more than its dispatcher has yet
to write, a step or two), about 512 KB for small results. A result
longer than :data:`RESULT_LIMIT` is not kept (its end is, marked: the
successor leaves that job to its take-back, as without a journal), so a
worker's journal never passes about 2 x 256 x 64 KB. The dispatcher
removes the journals of its workers once they are gone (their ends
written), and of other hosts' dead workers after :data:`FORGET_AFTER`.
Records: ``length (uint32), msgpack [type, id, lock, scheduled time,
resubmit, attempt, max attempts, started (epoch s), seconds, result bytes
or None, error dict or None, result cut, released by a drain]``. A record cut short by a death
is skipped, as is one that does not decode.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple, Optional

import msgpack

__all__ = [
    "ROTATE_BYTES",
    "ROTATE_RECORDS",
    "RESULT_LIMIT",
    "Ended",
    "JournalWriter",
    "host_key",
    "collect",
    "clear_old",
    "remove_host",
]

log = logging.getLogger("otpjobs.workers")

#: A journal's generation is full at this many records...
ROTATE_RECORDS = 256
#: ...and this many bytes.
ROTATE_BYTES = 256 * 1024
#: Results longer than this (bytes) are not kept in a journal.
RESULT_LIMIT = 64 * 1024
#: A dead worker's journal is removed once this old (seconds): its
#: dispatcher's, which wrote its ends within a step...
GONE_AFTER = 10.0
#: ...another host's, whose dispatcher's successor would have started long before.
FORGET_AFTER = 600.0
_PREFIX = "jr-"
_LEN = struct.Struct("<I")


class Ended(NamedTuple):
    """One run's end, read back from a journal."""

    job: tuple  #: (type, id, lock, scheduled_time, resubmit): a Job's fields
    attempt: int
    max_attempts: int
    started: Optional[float]
    seconds: float
    result: Optional[bytes]
    error: Optional[dict]
    cut: bool = False  #: the result was too long to keep: it is not known
    released: bool = False  #: the run was running when its host's drain told it to stop


def host_key(host: str) -> str:
    """The part of a journal's name that says which host its worker served."""
    return hashlib.sha1(host.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class JournalWriter:
    """A worker's journal: :meth:`ended` appends one run's end. Writes never
    raise (a full disk loses the journal's record, not the run: the channel
    still carries it)."""

    def __init__(self, directory: str, key: str) -> None:
        self.base = f"{directory}/{_PREFIX}{key}-{os.getpid()}-"
        self._lock = threading.Lock()
        self._fd: Optional[int] = None
        self._gen = 0
        self._size = 0
        self._records = 0
        try:
            self._rotate()  # opened now, not on the first end's path
        except OSError as exc:
            log.warning("journal_write_failed path=%s error=%r", self.base, exc)

    def ended(
        self,
        run: Any,
        started: Optional[float],
        seconds: float,
        result: Optional[bytes],
        error: Any,
        released: bool = False,
    ) -> None:
        """Append the end of ``run`` (a :class:`~actors.workers.protocol.RunJob`);
        ``released``: a drain had told it to stop."""
        job = run.job
        cut = result is not None and len(result) > RESULT_LIMIT
        payload = msgpack.packb(
            [
                job.type,
                job.id,
                job.lock,
                job.scheduled_time,
                job.resubmit,
                run.attempt,
                run.max_attempts,
                started,
                seconds,
                None if cut else result,
                error,
                cut,
                released,
            ],
            use_bin_type=True,
            default=str,
        )
        with self._lock:
            try:
                self._write(_LEN.pack(len(payload)) + payload)
            except OSError as exc:
                log.warning("journal_write_failed path=%s error=%r", self.base, exc)

    def _write(self, data: bytes) -> None:
        if self._fd is None or self._records >= ROTATE_RECORDS and self._size >= ROTATE_BYTES:
            self._rotate()
        assert self._fd is not None
        self._size += os.write(self._fd, data)
        self._records += 1

    def _rotate(self) -> None:
        """Start the next generation; remove the one before the last."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._gen += 1
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(f"{self.base}{self._gen}", flags, 0o600)
        self._size = self._records = 0
        if self._gen > 2:
            try:
                os.unlink(f"{self.base}{self._gen - 2}")
            except FileNotFoundError:
                pass

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def collect(directory: Path, key: str, alive: Any) -> list[Ended]:
    """Every end in the journals of ``key``'s host whose writer is no longer
    alive (``alive(pid)``), oldest generation first; those files are removed."""
    out: list[Ended] = []
    for path, pid, _ in sorted(_journals(directory, key), key=lambda e: (e[1], e[2])):
        if alive(pid):
            continue
        out.extend(_read(path))
        try:
            path.unlink()
        except OSError:
            pass
    return out


def clear_old(directory: Path, key: str, alive: Any, now: Optional[float] = None) -> int:
    """Remove the journals whose writer is gone: ``key``'s host's once
    :data:`GONE_AFTER` old (their ends are written), other hosts' once
    :data:`FORGET_AFTER` old; returns how many."""
    now = time.time() if now is None else now
    removed = 0
    for path, pid, _ in _journals(directory, None):
        if alive(pid):
            continue
        limit = GONE_AFTER if path.name.startswith(f"{_PREFIX}{key}-") else FORGET_AFTER
        try:
            if now - path.stat().st_mtime > limit:
                path.unlink()
                removed += 1
        except OSError:
            pass
    return removed


def remove_host(directory: Path, key: str) -> None:
    """Remove every journal of ``key``'s host (it stops, its ends written)."""
    for path, _, _ in _journals(directory, key):
        try:
            path.unlink()
        except OSError:
            pass


def _journals(directory: Path, key: Optional[str]) -> list[tuple[Path, int, int]]:
    """``(path, writer pid, generation)`` of the journals in ``directory`` (of ``key``'s host only, if given)."""
    prefix = _PREFIX if key is None else f"{_PREFIX}{key}-"
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in names:
        if not name.startswith(prefix):
            continue
        parts = name[len(_PREFIX) :].split("-")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            out.append((Path(directory) / name, int(parts[1]), int(parts[2])))
    return out


def _read(path: Path) -> list[Ended]:
    """The ends a journal file holds (a record cut short, or unreadable, skipped)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        log.warning("journal_unreadable path=%s error=%r", path, exc)
        return []
    out = []
    at = 0
    while at + _LEN.size <= len(data):
        (size,) = _LEN.unpack_from(data, at)
        at += _LEN.size
        if at + size > len(data):
            break  # the last record, cut short by the writer's death
        ended = _decode(data[at : at + size])
        at += size
        if ended is None:
            log.warning("journal_record_unreadable path=%s offset=%d", path, at - size)
            continue
        out.append(ended)
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _decode(raw: bytes) -> Optional[Ended]:
    try:
        v = msgpack.unpackb(raw, raw=False)
        job = (v[0], v[1], v[2], v[3], bool(v[4]))
        released = len(v) > 12 and bool(v[12])  # records written before it had 12 fields
        ended = Ended(job, int(v[5]), int(v[6]), v[7], float(v[8]), v[9], v[10], bool(v[11]), released)
    except Exception:  # noqa: BLE001 - any decoding failure is the same unreadable record
        return None
    if not (isinstance(job[0], str) and isinstance(job[1], str) and isinstance(job[2], str)):
        return None
    if not (job[3] is None or isinstance(job[3], int)) or not (ended.started is None or _finite(ended.started)):
        return None
    if not _finite(ended.seconds):
        return None
    if ended.result is not None and not isinstance(ended.result, bytes):
        return None
    if ended.error is not None and not isinstance(ended.error, dict):
        return None
    return ended
