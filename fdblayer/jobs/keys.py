"""Key layout of the jobs layer: every key the data model reads or writes.

Principle: keys are tuple-packed under one layer prefix and built only here,
so the data model never concatenates bytes by hand. The layout is the seed's
(``couch_jobs.hrl``), with ``P`` the layer prefix (by default the packed
tuple ``(51,)``, the seed's ``?JOBS``)::

    (P, DATA, type, job_id) = (seq, lock, sched_time, resubmit, data)
    (P, PENDING, type, sched_time, job_id) = b""
    (P, WATCHES_PENDING, type) = counter, 8 bytes little-endian
    (P, WATCHES_ACTIVITY, type) = (versionstamp,)
    (P, ACTIVITY_TIMEOUT, type) = (timeout_seconds,)
    (P, ACTIVITY, type, versionstamp) = (job_id, data)
    (P, WORK, type, job_id) = work record (msgpack map; see jobs.work)
    (P, SCHEDULES, type) = periodic schedule (msgpack map; see jobs.work)
    (P, COUNTS, type, name) = counter, 8 bytes little-endian (see jobs.counts)
    (P, HOSTS, host) = a worker host's heartbeat (see jobs.hosts)
    (P, FAILURES, type, ended_ms, job_id) = b"" (recent failures, see jobs.failures)
    (P, FINISHED, type, outcome, ended_ms, job_id) = b"" (finished pool jobs, see jobs.finished)
    (P, FINISHED, type, "pruned") = int64 LE ms (pruned up to, see jobs.finished)
    (P, PAUSED, type) = b"1" while the type is paused (see jobs.work)
    (P, PRIO_PENDING, type, priority, sched_time, job_id) = b""
                            (the pending queue of priorities 1-9; priority 0, the
                            default, is the PENDING row above: see jobs.pending)
    (P, TYPE_PRIORITY, type) = (priority,): the priority of a job enqueued
                            without one (its handler's declared default)

In the DATA row, ``seq`` is ``0`` while the job is pending, ``None`` once
it is finished and the versionstamp of its last accept/update while it is
running; ``lock`` is None unless the job is running. ``data`` is the
msgpack encoding of the job data (see :mod:`fdblayer.jobs.codec`).

The seed caches the ``couchdb`` directory prefix in an ETS table and checks
FoundationDB's metadata version to refresh it. Here a :class:`Layout` is an
immutable value built once (the store backend resolves any directory
prefix when the database is opened), so there is nothing to refresh.
"""

from __future__ import annotations

import functools
from typing import Any, Union, cast

import fdb.tuple

__all__ = [
    "JOBS",
    "DATA",
    "PENDING",
    "WATCHES_PENDING",
    "WATCHES_ACTIVITY",
    "ACTIVITY_TIMEOUT",
    "ACTIVITY",
    "WORK",
    "SCHEDULES",
    "COUNTS",
    "HOSTS",
    "FAILURES",
    "FINISHED",
    "PAUSED",
    "PRIO_PENDING",
    "TYPE_PRIORITY",
    "MAX_PRIORITY",
    "JobType",
    "Layout",
    "DEFAULT_LAYOUT",
    "new_versionstamp",
    "pack_element",
]

JOBS = 51
DATA = 1
PENDING = 2
WATCHES_PENDING = 3
WATCHES_ACTIVITY = 4
ACTIVITY_TIMEOUT = 5
ACTIVITY = 6
WORK = 7
SCHEDULES = 8
COUNTS = 9
HOSTS = 10
FAILURES = 11
FINISHED = 12
PAUSED = 13
PRIO_PENDING = 14
TYPE_PRIORITY = 15
#: Priorities are 0 (the default, first) to MAX_PRIORITY (last), as Oban's.
MAX_PRIORITY = 9

JobType = Union[str, int, tuple[Any, ...]]

_TYPE_CACHE_SIZE = 4096
_ELEMENT_CACHE_SIZE = 16384


def new_versionstamp(user_version: int = 0) -> fdb.tuple.Versionstamp:
    """Return an incomplete versionstamp for ``pack_with_versionstamp``.

    (``fdblayer`` lets ``fdb.tuple`` pack versionstamps without libfdb_c.)
    """
    return fdb.tuple.Versionstamp(user_version=user_version)


def pack_element(element: Any) -> bytes:
    """Return ``fdb.tuple.pack((element,))``.

    A ``str`` (job ids, mostly unique) is encoded directly: the tuple
    layer's unicode encoding is type code 0x02, the UTF-8 bytes with each
    zero escaped as ``00 ff``, then a zero terminator. Other elements go
    through :func:`_pack_element_cached`.
    """
    if type(element) is str:
        return b"\x02" + element.encode("utf-8").replace(b"\x00", b"\x00\xff") + b"\x00"
    return _pack_element_cached(element)


@functools.lru_cache(maxsize=_ELEMENT_CACHE_SIZE)
def _pack_element_cached(element: Any) -> bytes:
    """Return ``fdb.tuple.pack((element,))``, memoised.

    The tuple encoding is concatenative (``pack((a, b)) == pack((a,)) +
    pack((b,))``), as the bindings' ``prefix`` argument relies on, so a key is
    its cached prefix followed by its packed elements. Ids and times recur
    across a job's transactions (add, accept, update, finish), so the cache
    saves most packing on the hot path.
    """
    return cast(bytes, fdb.tuple.pack((element,)))


class Layout:
    """Builds the jobs layer's keys under one prefix.

    Args:
        prefix: Bytes every key of the layer starts with. Two layouts with
            different prefixes are two independent job queues in one store.
    """

    def __init__(self, prefix: bytes = fdb.tuple.pack((JOBS,))) -> None:
        if not isinstance(prefix, bytes):
            raise TypeError(f"layer prefix must be bytes, not {type(prefix)!r}")
        self.prefix = prefix
        # Per-type prefixes are packed once: types are few and keys are hot.
        self._type_prefix = functools.lru_cache(maxsize=_TYPE_CACHE_SIZE)(self._pack_type_prefix)
        self._stamped_activity = functools.lru_cache(maxsize=_TYPE_CACHE_SIZE)(self._pack_stamped_activity)

    def __repr__(self) -> str:
        return f"Layout({self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Layout, (self.prefix,))

    def _pack_type_prefix(self, subspace: int, job_type: JobType) -> bytes:
        return cast(bytes, fdb.tuple.pack((subspace, job_type), prefix=self.prefix))

    def subspace(self, subspace: int) -> bytes:
        """Return the prefix of a whole subspace, e.g. ``(P, DATA)``."""
        return cast(bytes, fdb.tuple.pack((subspace,), prefix=self.prefix))

    # DATA

    def data_prefix(self, job_type: JobType) -> bytes:
        """Return the prefix of every DATA row of ``job_type``."""
        return self._type_prefix(DATA, job_type)

    def data_key(self, job_type: JobType, job_id: str) -> bytes:
        """Return the DATA row key of one job."""
        return self._type_prefix(DATA, job_type) + pack_element(job_id)

    def unpack_data_key(self, key: bytes) -> tuple[JobType, str]:
        """Return ``(job_type, job_id)`` of a DATA row key."""
        job_type, job_id = fdb.tuple.unpack(key, len(self.subspace(DATA)))
        return job_type, job_id

    # PENDING

    def pending_prefix(self, job_type: JobType, priority: int = 0) -> bytes:
        """Return the prefix of the pending queue of ``job_type`` at ``priority``."""
        if priority:
            return self._type_prefix(PRIO_PENDING, job_type) + pack_element(priority)
        return self._type_prefix(PENDING, job_type)

    def type_priority_key(self, job_type: JobType) -> bytes:
        """Return the key of the priority a job of ``job_type`` gets when enqueued without one."""
        return self._type_prefix(TYPE_PRIORITY, job_type)

    def prio_pending_prefix(self, job_type: JobType) -> bytes:
        """Return the prefix of the pending queues of ``job_type``'s priorities 1-9."""
        return self._type_prefix(PRIO_PENDING, job_type)

    def pending_key(self, job_type: JobType, sched_time: int, job_id: str, priority: int = 0) -> bytes:
        """Return the pending-queue key of one job."""
        return self.pending_prefix(job_type, priority) + pack_element(sched_time) + pack_element(job_id)

    def pending_time_prefix(self, job_type: JobType, sched_time: int, priority: int = 0) -> bytes:
        """Return the prefix of the pending jobs scheduled at ``sched_time``."""
        return self.pending_prefix(job_type, priority) + pack_element(sched_time)

    def pending_end(self, job_type: JobType, max_sched_time: int, priority: int = 0) -> bytes:
        """Return the first key after every job scheduled at or before the time."""
        return self.pending_time_prefix(job_type, max_sched_time, priority) + b"\xff"

    # WATCHES

    def watches_pending_key(self, job_type: JobType) -> bytes:
        """Return the counter key bumped on every enqueue of ``job_type``."""
        return self._type_prefix(WATCHES_PENDING, job_type)

    def watches_activity_key(self, job_type: JobType) -> bytes:
        """Return the key stamped on every activity of ``job_type``."""
        return self._type_prefix(WATCHES_ACTIVITY, job_type)

    # ACTIVITY_TIMEOUT

    def activity_timeout_key(self, job_type: JobType) -> bytes:
        """Return the key holding the activity timeout of ``job_type``."""
        return self._type_prefix(ACTIVITY_TIMEOUT, job_type)

    def unpack_activity_timeout_key(self, key: bytes) -> JobType:
        """Return the job type of an ACTIVITY_TIMEOUT key."""
        (job_type,) = fdb.tuple.unpack(key, len(self.subspace(ACTIVITY_TIMEOUT)))
        return cast(JobType, job_type)

    # ACTIVITY

    def activity_prefix(self, job_type: JobType) -> bytes:
        """Return the prefix of the activity rows of ``job_type``."""
        return self._type_prefix(ACTIVITY, job_type)

    def activity_key(self, job_type: JobType, vs: fdb.tuple.Versionstamp) -> bytes:
        """Return the activity key of a complete versionstamp."""
        if not vs.is_complete():
            raise ValueError("activity_key needs a complete versionstamp")
        return self._type_prefix(ACTIVITY, job_type) + b"\x33" + cast(bytes, vs.to_bytes())

    def activity_key_stamped(self, job_type: JobType, user_version: int = 0) -> bytes:
        """Return an activity key to write with ``set_versionstamped_key``.

        Every versionstamp of one commit is the same; ``user_version`` (the
        versionstamp's last two bytes) tells apart the jobs one transaction
        accepts or updates, as erlfdb's per-transaction ids do in the seed.
        """
        base: bytes = self._stamped_activity(job_type)
        if user_version == 0:
            return base
        if not 0 < user_version <= 0xFFFF:
            new_versionstamp(user_version)  # raises as the bindings do
        # the packed stamp's last two bytes (before the 4-byte position) are the user version, big-endian
        return base[:-6] + user_version.to_bytes(2, "big") + base[-4:]

    def _pack_stamped_activity(self, job_type: JobType) -> bytes:
        stamp = (new_versionstamp(),)
        return cast(bytes, fdb.tuple.pack_with_versionstamp(stamp, prefix=self._type_prefix(ACTIVITY, job_type)))

    # WORK, SCHEDULES (the worker pools' records beside the couch_jobs rows)

    def work_key(self, job_type: JobType, job_id: str) -> bytes:
        """Return the key of one job's work record (attempts, progress, outcome)."""
        return self._type_prefix(WORK, job_type) + pack_element(job_id)

    def work_prefix(self, job_type: JobType) -> bytes:
        """Return the prefix of every work record of ``job_type``."""
        return self._type_prefix(WORK, job_type)

    def schedule_key(self, job_type: JobType) -> bytes:
        """Return the key of ``job_type``'s periodic schedule."""
        return self._type_prefix(SCHEDULES, job_type)

    # COUNTS (per type, kept by every transition: see ``counts``)

    def count_key(self, job_type: JobType, name: str) -> bytes:
        """Return the key of one of ``job_type``'s counters."""
        return self._type_prefix(COUNTS, job_type) + pack_element(name)

    def counts_prefix(self, job_type: JobType) -> bytes:
        """Return the prefix of every counter of ``job_type``."""
        return self._type_prefix(COUNTS, job_type)

    def paused_key(self, job_type: JobType) -> bytes:
        """Return the key that exists while ``job_type`` is paused."""
        return self._type_prefix(PAUSED, job_type)

    # FAILURES (per type, by end time: see ``failures``)

    def failure_key(self, job_type: JobType, ended_ms: int, job_id: str) -> bytes:
        """Return the key recording that ``job_id`` failed for good at ``ended_ms``."""
        return self._type_prefix(FAILURES, job_type) + pack_element(ended_ms) + pack_element(job_id)

    def failures_before(self, job_type: JobType, ended_ms: int) -> bytes:
        """Return the first failure key of ``job_type`` at or after ``ended_ms``."""
        return self._type_prefix(FAILURES, job_type) + pack_element(ended_ms)

    def failures_prefix(self, job_type: JobType) -> bytes:
        """Return the prefix of every failure key of ``job_type``."""
        return self._type_prefix(FAILURES, job_type)

    # FINISHED (per type and outcome, by end time: see ``finished``)

    def finished_key(self, job_type: JobType, outcome: str, ended_ms: int, job_id: str) -> bytes:
        """Return the key recording that ``job_id`` finished with ``outcome`` at ``ended_ms``."""
        return self.finished_prefix(job_type, outcome) + pack_element(ended_ms) + pack_element(job_id)

    def finished_prefix(self, job_type: JobType, outcome: str) -> bytes:
        """Return the prefix of every finished key of ``job_type`` with ``outcome``."""
        return self._type_prefix(FINISHED, job_type) + pack_element(outcome)

    def finished_before(self, job_type: JobType, outcome: str, ended_ms: int) -> bytes:
        """Return the first finished key of ``job_type`` with ``outcome`` at or after ``ended_ms``."""
        return self.finished_prefix(job_type, outcome) + pack_element(ended_ms)

    def pruned_key(self, job_type: JobType) -> bytes:
        """Return the key holding the latest end time (ms) of a pruned job of ``job_type``."""
        return self._type_prefix(FINISHED, job_type) + pack_element("pruned")


DEFAULT_LAYOUT = Layout()
