"""Watches: futures fired when a key's committed value changes.

Principle: a watch remembers the value its key had when its transaction
committed; it fires as soon as a later committed value differs, whoever
committed it (this process or another). Like FoundationDB, a change and its
undo in quick succession (A -> B -> A) may go unnoticed.

One ``WatchHub`` per database handle and process owns one daemon thread. The
thread sleeps on a wake-up source and, when woken, asks the backend for the
current values of the watched keys (one read) and fires the watches whose
value differs. The wake-up source of the SQLite backend is inotify on the
store's directory (see ``DirectoryNotifier``), so a waiter learns of a commit
within microseconds of the committer's notification write, without polling.
Where inotify is missing the hub falls back to a slow poll and logs it.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import hashlib
import logging
import math
import os
import re
import select
import struct
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Protocol, Set, Tuple

__all__ = [
    "Watch",
    "WatchHub",
    "Notifier",
    "DirectoryNotifier",
    "FALLBACK_POLL_INTERVAL",
    "UNKNOWN_CHANGES",
    "UNKNOWN_VALUE",
    "change_note",
    "note_names",
]

logger = logging.getLogger(__name__)

#: Seconds between checks when no change notification is available.
FALLBACK_POLL_INTERVAL = 0.05


class _State(enum.Enum):
    """A watch's state: pending until it fires or is cancelled (then for good)."""

    PENDING = "pending"
    FIRED = "fired"
    CANCELLED = "cancelled"


_PENDING, _FIRED, _CANCELLED = _State.PENDING, _State.FIRED, _State.CANCELLED


class Watch:
    """A future resolved when its key changes (fired) or when cancelled.

    Args:
        key: the watched key.
    """

    def __init__(self, key: bytes) -> None:
        self.key = key
        self._cond = threading.Condition()
        self._state = _PENDING
        self._callbacks: List[Callable[["Watch"], None]] = []
        self._on_cancel: Optional[Callable[["Watch"], None]] = None

    def __repr__(self) -> str:
        return f"<Watch {self.key!r} {self._state}>"

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the key changes, the watch is cancelled, or ``timeout``.

        Returns:
            True when the key changed, False on timeout or cancel.
        """
        with self._cond:
            self._cond.wait_for(lambda: self._state != _PENDING, timeout)
            return self._state == _FIRED

    def is_ready(self) -> bool:
        """True once fired or cancelled."""
        return self._state != _PENDING

    def fired(self) -> bool:
        """True when the key changed."""
        return self._state == _FIRED

    def cancelled(self) -> bool:
        """True when cancelled before firing."""
        return self._state == _CANCELLED

    def cancel(self) -> None:
        """Stop watching; waiters return False. No effect once fired."""
        if self._resolve(_CANCELLED) and self._on_cancel is not None:
            self._on_cancel(self)

    def on_ready(self, callback: Callable[["Watch"], None]) -> None:
        """Call ``callback(watch)`` once resolved (at once if already resolved)."""
        with self._cond:
            if self._state == _PENDING:
                self._callbacks.append(callback)
                return
        self._invoke(callback)

    def _fire(self) -> None:
        """Resolve as changed (called by the hub)."""
        self._resolve(_FIRED)

    def _resolve(self, state: _State) -> bool:
        with self._cond:
            if self._state != _PENDING:
                return False
            self._state = state
            callbacks, self._callbacks = self._callbacks, []
            self._cond.notify_all()
        for callback in callbacks:
            self._invoke(callback)
        return True

    def _invoke(self, callback: Callable[["Watch"], None]) -> None:
        try:
            callback(self)
        except Exception:  # a bad callback must not break the hub thread
            logger.exception("watch_callback_failed key=%r", self.key)


class _UnknownValue(bytes):
    """See :data:`UNKNOWN_VALUE`."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = bytes.__hash__


#: The value to register a watch with when the transaction cannot say which
#: value its key had in what it read (a SQLite snapshot gone stale, then
#: upgraded: its view spans two states): equal to no value, so the hub's
#: first read of the key fires the watch. A spurious wake-up costs a
#: watcher one more look; a missed one strands its work.
UNKNOWN_VALUE: bytes = _UnknownValue(b"")


# --------------------------------------------------------------------------- change notes

#: A commit's note when it cannot name the keys it changed: every hub reads.
UNKNOWN_CHANGES = "*"
#: Keys a note names at most (a bigger commit's note is UNKNOWN_CHANGES).
NOTE_MAX_KEYS = 32
#: The name a keyed notifier reports for a change it cannot place: read.
UNPLACED = b"commit"


#: A note's list of digests (16 hex digits each, comma-separated).
_DIGESTS = re.compile(r"[0-9a-f]{16}(?:,[0-9a-f]{16})*")


def _digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=8).hexdigest().encode()


def change_note(changed: Optional[Tuple[List[bytes], List[bytes]]]) -> str:
    """The note a committer sends with its notification: the digests of the
    keys it certainly changed and of those it maybe changed (``"c1,c2 m1"``,
    ``-`` for none), or :data:`UNKNOWN_CHANGES` when ``changed`` is None or
    names more than :data:`NOTE_MAX_KEYS` keys."""
    if changed is None or len(changed[0]) + len(changed[1]) > NOTE_MAX_KEYS:
        return UNKNOWN_CHANGES
    return " ".join(b",".join(_digest(k) for k in keys).decode() or "-" for keys in changed)


def note_names(version: int, note: str) -> Set[bytes]:
    """What a keyed notifier reports for a commit's ``note`` (see
    :func:`change_note`) at ``version``: ``c:<digest>:<version>`` for a key
    certainly changed, ``m:<digest>`` for a key maybe changed, or
    :data:`UNPLACED` when the note names no keys (or is unreadable)."""
    parts = note.split(" ")
    if len(parts) != 2 or not all(part == "-" or _DIGESTS.fullmatch(part) for part in parts):
        return {UNPLACED}
    certain, maybe = (set() if part == "-" else set(part.encode().split(b",")) for part in parts)
    stamp = b":%d" % version
    return {b"c:" + d + stamp for d in certain} | {b"m:" + d for d in maybe}


# --------------------------------------------------------------------------- inotify

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_Q_OVERFLOW = 0x4000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT_HEADER = struct.Struct("iIII")


class Notifier(Protocol):
    """A watch hub's wake-up source: a descriptor to select on (-1 while it
    has none: the hub then polls), the names of what changed since the last
    ``drain``, and ``close``. :class:`DirectoryNotifier` (inotify) and the
    PostgreSQL backend's ``LISTEN`` are two. A notifier whose ``keyed``
    attribute is True reports keys (:func:`note_names`): the hub then reads
    only for a watched key maybe changed, and fires a watched key certainly
    changed after its watch's version without reading."""

    fd: int

    def drain(self) -> Set[bytes]: ...

    def close(self) -> None: ...


class DirectoryNotifier:
    """inotify on one directory, reporting events on a set of file names.

    Args:
        directory: the directory to watch.
        names: the file names of interest (e.g. ``store.db-notify``).

    Raises:
        OSError: when inotify is not available.
    """

    MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE

    def __init__(self, directory: str, names: Iterable[str]) -> None:
        self.names = {os.fsencode(n) for n in names}
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc (find_library runs gcc)
        self.fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        wd = libc.inotify_add_watch(self.fd, os.fsencode(directory), self.MASK)
        if wd < 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"inotify_add_watch({directory}): {os.strerror(err)}")

    def drain(self) -> Set[bytes]:
        """Read every queued event; return the names of interest that changed.

        An overflowed queue reports every name (the caller must re-check).
        """
        seen: Set[bytes] = set()
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return seen
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset + _EVENT_HEADER.size <= len(buf):
                _wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(buf, offset)
                name = buf[offset + _EVENT_HEADER.size : offset + _EVENT_HEADER.size + length]
                offset += _EVENT_HEADER.size + length
                if mask & _IN_Q_OVERFLOW:
                    seen |= self.names
                name = name.rstrip(b"\x00")
                if name in self.names:
                    seen.add(name)

    def close(self) -> None:
        """Release the inotify descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _readable(fds: List[int], timeout: Optional[float]) -> List[int]:
    """The descriptors among ``fds`` readable (or hung up) within ``timeout``
    seconds (None: until one is). ``poll``, not ``select``: a process may
    hold more than 1,024 descriptors (a server's sockets), and ``select``
    refuses a descriptor numbered 1,024 or more."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return [fd for fd, _ in poller.poll(ms)]


# --------------------------------------------------------------------------- hub

#: ``read(keys, force)`` -> current values by key, or None when nothing changed;
#: raises when it could not read (the store away, its connection lost): the
#: hub then reads again, forced, ``READ_RETRY_FIRST`` later and backing off.
ValueReader = Callable[[List[bytes], bool], Optional[Dict[bytes, Optional[bytes]]]]


class WatchHub:
    """The watch thread of one database handle in one process.

    Args:
        read_values: reads the committed values of keys (called on the hub
            thread only); with ``force`` False it may return None to say that
            nothing was committed since its last call.
        notifier_factory: builds the wake-up source, or raises OSError when
            unavailable (then the hub polls every ``FALLBACK_POLL_INTERVAL``).
        recheck_names: names whose events precede commit visibility (e.g. the
            WAL written by a foreign writer): they cause one delayed re-check.
        name: a label for the thread and the logs.
    """

    RECHECK_DELAY = 0.02
    #: Seconds after a read that served no watch before the next read.
    #: Every write commit of any process wakes the thread; under a stream of
    #: commits to other keys it would read back to back, taking the GIL from
    #: its process's own work (4 busy workers, each with one idle watch,
    #: lost half their throughput). After such a read, the wake-ups of the
    #: next 5 ms are served by one read: a watch then fires up to 5 ms
    #: late. A read that fired a watch (or armed new ones) starts no pause,
    #: so a key changed again and again wakes its waiters at once.
    MIN_CHECK_INTERVAL = 0.005
    #: Seconds before a failed read is tried again, doubled after each
    #: failure up to ``READ_RETRY_MAX``. A failed read is never dropped: the
    #: commit it was to compare with may have been the last one for a long
    #: time (its notification missed while the listener was away).
    READ_RETRY_FIRST = 0.05
    READ_RETRY_MAX = 1.0
    #: Seconds a loop must run before its failure counts as a new incident
    #: (logged as a warning again, its backoff from the start).
    LOOP_QUIET_RESET = 60.0

    def __init__(
        self,
        read_values: ValueReader,
        notifier_factory: Optional[Callable[[], Notifier]],
        recheck_names: Iterable[str] = (),
        name: str = "store",
    ) -> None:
        self._read_values = read_values
        self._notifier_factory = notifier_factory
        self._recheck_names = {os.fsencode(n) for n in recheck_names}
        self._name = name
        self._lock = threading.Lock()
        #: key -> [(value, watch, version of the value or None)]
        self._watches: Dict[bytes, List[Tuple[Optional[bytes], Watch, Optional[int]]]] = {}
        self._digests: Dict[bytes, bytes] = {}  # a watched key's digest -> the key
        self._dirty = False
        self._closed = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread: Optional[threading.Thread] = None
        self._read_failures = 0
        self.mode = "not started"

    def register(self, key: bytes, value: Optional[bytes], watch: Watch, version: Optional[int] = None) -> None:
        """Arm ``watch``: fire it once ``key``'s committed value differs from
        ``value``, the value at commit version ``version`` (where the store
        numbers its commits: a keyed notifier's certain change after it
        fires the watch without a read)."""
        with self._lock:
            if self._closed:
                watch.cancel()
                return
            if key not in self._watches:
                self._digests[_digest(key)] = key
            self._watches.setdefault(key, []).append((value, watch, version))
            self._dirty = True
            if self._thread is None:
                self._start()
        watch._on_cancel = self._forget
        self.wake()

    def wake(self) -> None:
        """Make the thread check now (called after a local commit)."""
        try:
            os.write(self._wake_w, b"\x00")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is already pending) or closed

    def close(self) -> None:
        """Stop the thread and cancel every pending watch."""
        with self._lock:
            self._closed = True
            pending = [e[1] for entries in self._watches.values() for e in entries]
            self._watches.clear()
            self._digests.clear()
            thread = self._thread
        self.wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        for watch in pending:
            watch.cancel()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def pending_count(self) -> int:
        """How many watches are armed."""
        with self._lock:
            return sum(len(v) for v in self._watches.values())

    def _forget(self, watch: Watch) -> None:
        with self._lock:
            entries = self._watches.get(watch.key)
            if entries is None:
                return
            self._keep(watch.key, [e for e in entries if e[1] is not watch])

    def _keep(self, key: bytes, entries: List[Tuple[Optional[bytes], Watch, Optional[int]]]) -> None:
        """Leave ``entries`` as the key's watches, or forget the key when none
        is left (its digest too); the lock held."""
        if entries:
            self._watches[key] = entries
        else:
            del self._watches[key]
            self._digests.pop(_digest(key), None)

    def _sift(self, names: Set[bytes]) -> Set[bytes]:
        """A keyed notifier's names: fire the watches of keys certainly changed
        by a commit after their version; return :data:`UNPLACED` when a read
        is due (a change it cannot place, a watched key maybe changed), else
        nothing."""
        fired: List[Watch] = []
        due = False
        with self._lock:
            for name in names:
                kind, _, rest = name.partition(b":")
                if kind == b"m":
                    due = due or rest in self._digests
                    continue
                if kind != b"c":
                    due = True
                    continue
                digest, _, version = rest.partition(b":")
                key = self._digests.get(digest)
                if key is None:
                    continue
                keep = []
                for entry in self._watches[key]:
                    if entry[2] is None:
                        due = True  # a value of no known version: a read compares it
                        keep.append(entry)
                    elif entry[2] < int(version):
                        fired.append(entry[1])
                    else:
                        keep.append(entry)
                self._keep(key, keep)
        for watch in fired:
            watch._fire()
        return {UNPLACED} if due else set()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"fdblayer-watch-{self._name}", daemon=True)
        self._thread.start()

    def _open_notifier(self) -> Optional[Notifier]:
        if self._notifier_factory is None:
            self.mode = "poll"
            return None
        try:
            notifier = self._notifier_factory()
        except OSError as exc:
            logger.warning(
                "store_watch_polling store=%s reason=%s interval_ms=%.0f",
                self._name,
                exc,
                FALLBACK_POLL_INTERVAL * 1000,
            )
            self.mode = "poll"
            return None
        self.mode = "inotify"
        return notifier

    def _run(self) -> None:
        """The thread: the loop, started again (watches kept, the next read
        forced) if it ever raises, so a bug in it costs wake-ups a backoff
        late, never a waiter left waiting on a cancelled or dead watch."""
        failures = 0
        while not self._closed:
            notifier = self._open_notifier()
            started = time.monotonic()
            try:
                self._loop(notifier)
                return
            except Exception:  # noqa: BLE001 - the thread's outer boundary
                if time.monotonic() - started > self.LOOP_QUIET_RESET:
                    failures = 0  # a new incident: logged again
                failures += 1
                if failures == 1:
                    logger.exception("store_watch_loop_failed store=%s action=restart_forced", self._name)
                else:
                    logger.debug("store_watch_loop_failed store=%s failures=%d", self._name, failures, exc_info=True)
            finally:
                if notifier is not None:
                    notifier.close()
            time.sleep(min(self.READ_RETRY_MAX, self.READ_RETRY_FIRST * 2 ** (failures - 1)))
            with self._lock:
                if self._closed:
                    return
                self._dirty = True
            self._check()  # served at the backoff's pace even if the loop keeps failing

    def _loop(self, notifier: Optional[Notifier]) -> None:
        """Read the watched keys when told of a commit (``MIN_CHECK_INTERVAL``
        after a read that served no watch, at once otherwise).

        A local commit (the pipe) or a committer's notification (a name not
        in ``recheck_names``) means "committed": check now. A recheck name
        alone (the WAL, written before the commit is visible) schedules one
        check ``RECHECK_DELAY`` later, for writers that do not notify: our
        own committers notify right after, and an early read would only
        push the useful one into the next pause.
        """
        recheck_at: Optional[float] = None
        last_check = 0.0
        while not self._closed:
            # A notifier may change its descriptor (a listener that reconnected)
            # or have none for a while (-1: its server is away; polled below).
            live = notifier is not None and notifier.fd >= 0
            fds = [self._wake_r] + ([notifier.fd] if live else [])  # type: ignore[union-attr]
            ready = _readable(fds, self._wait(notifier, recheck_at))
            pause = last_check + self.MIN_CHECK_INTERVAL - time.monotonic()
            if pause > 0:  # a stream of commits: let more of them join the next read
                time.sleep(pause)
                ready = _readable(fds, 0)
            due = notifier is None  # polling: every timeout is a check
            if self._wake_r in ready:
                self._drain_pipe()
                due = True
            if notifier is not None and (notifier.fd in ready or not live):
                names = notifier.drain()
                if names and getattr(notifier, "keyed", False):
                    names = self._sift(names)
                if names - self._recheck_names:
                    due = True
                elif names and recheck_at is None:
                    recheck_at = time.monotonic() + self.RECHECK_DELAY
            if recheck_at is not None and time.monotonic() >= recheck_at:
                due = True
            if self._closed:
                return
            if not due:
                continue
            recheck_at = None
            checked_at = time.monotonic()
            if not self._check():  # only a read that served no watch starts a pause
                last_check = checked_at
            if self._read_failures:
                recheck_at = checked_at + self._retry_delay()

    @staticmethod
    def _wait(notifier: Optional[Notifier], recheck_at: Optional[float]) -> Optional[float]:
        """The wait's timeout: the poll interval, the time to a due recheck, or none."""
        timeout = None if notifier is not None and notifier.fd >= 0 else FALLBACK_POLL_INTERVAL
        if recheck_at is not None:
            left = max(0.0, recheck_at - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        return timeout

    def _drain_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _read_failed(self, exc: Exception) -> None:
        """A read failed: the next one is forced (it compares every value,
        whatever the store's version says); the first failure of a run is
        logged as a warning, the others at debug."""
        with self._lock:
            self._dirty = True
        self._read_failures += 1
        level = logging.WARNING if self._read_failures == 1 else logging.DEBUG
        logger.log(
            level,
            "store_watch_read_failed store=%s error=%s retry_in_ms=%.0f",
            self._name,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            self._retry_delay() * 1000,
        )

    def _retry_delay(self) -> float:
        """Seconds before the next try after ``_read_failures`` failed reads."""
        return float(min(self.READ_RETRY_MAX, self.READ_RETRY_FIRST * 2 ** max(0, self._read_failures - 1)))

    def _check(self) -> bool:
        """Read the watched keys and fire the watches whose value changed.

        Returns:
            True when the read served a watch: it fired one, or it was the
            first read of newly registered ones. False for a read that a
            commit of other keys caused.
        """
        with self._lock:
            if not self._watches:
                self._read_failures = 0  # nothing to read: no retry is due
                return False
            keys = list(self._watches)
            force, self._dirty = self._dirty, False
        try:
            values = self._read_values(keys, force)
        except Exception as exc:  # noqa: BLE001 - any failed read is tried again (see READ_RETRY_FIRST)
            self._read_failed(exc)
            return True
        if self._read_failures:
            logger.info("store_watch_read_back store=%s failures=%d", self._name, self._read_failures)
            self._read_failures = 0
        if values is None:
            return force
        fired: List[Watch] = []
        with self._lock:
            for key in keys:
                entries = self._watches.get(key)
                if not entries:
                    continue
                current = values.get(key)
                fired.extend(e[1] for e in entries if e[0] != current)
                self._keep(key, [e for e in entries if e[0] == current and not e[1].is_ready()])
        for watch in fired:
            watch._fire()
        return force or bool(fired)
