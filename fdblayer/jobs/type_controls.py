"""Per-type controls that producers and hosts set: the pause (no host
claims a paused type's jobs) and the priority a type's handler declares for
jobs enqueued without one. Claims and enqueues read them (:mod:`.work`)."""

from __future__ import annotations

from typing import NamedTuple, Optional

import fdb.tuple

from fdblayer.interface import Transaction, strinc, transactional
from fdblayer.jobs import activity, model
from fdblayer.jobs.codec import report_bad_row
from fdblayer.jobs.exceptions import NoTypeTimeout
from fdblayer.jobs.keys import PAUSED, JobType, Layout
from fdblayer.jobs.tally import Tally
from fdblayer.watches import Watch

__all__ = [
    "type_priority",
    "set_type_priority",
    "declare_types",
    "set_paused",
    "paused_types",
    "Controls",
    "watch_controls",
]


def type_priority(tr: Transaction, layout: Layout, job_type: JobType) -> int:
    """The priority a job of ``job_type`` enqueued without one gets: its
    handler's declared default (:func:`set_type_priority`), else 0; a stored
    value that is not one reads as 0."""
    return model.stored_priority(tr.snapshot.get(layout.type_priority_key(job_type)))


@transactional
def set_type_priority(tr: Transaction, layout: Layout, job_type: JobType, priority: Optional[int]) -> None:
    """Give the jobs of ``job_type`` enqueued without a priority this one (None: 0)."""
    key = layout.type_priority_key(job_type)
    if priority:
        tr.set(key, fdb.tuple.pack((priority,)))
    else:
        tr.clear(key)


@transactional
def declare_types(tr: Transaction, layout: Layout, types: dict[JobType, tuple[float, Optional[int]]]) -> int:
    """Declare each type of ``types`` = ``{type: (timeout, priority)}`` as a
    host serving it does: the type timeout where the type has none (one it
    has is kept), and the declared priority (:func:`set_type_priority`).
    Reads them all at once and writes only what differs, so a host that
    starts again over the same types commits nothing; returns the rows written."""
    names = list(types)
    timeout_keys = [layout.activity_timeout_key(t) for t in names]
    priority_keys = [layout.type_priority_key(t) for t in names]
    raws = tr.get_many(timeout_keys + priority_keys)
    written = 0
    for n, job_type in enumerate(names):
        timeout, priority = types[job_type]
        if raws[n] is None:
            activity.set_type_timeout(tr, layout, job_type, timeout)
            written += 1
        wanted = fdb.tuple.pack((priority,)) if priority else None
        if raws[len(names) + n] != wanted:
            set_type_priority(tr, layout, job_type, priority)
            written += 1
    return written


@transactional
def set_paused(tr: Transaction, layout: Layout, job_type: JobType, paused: bool) -> bool:
    """Pause (no host claims its jobs; running ones go on) or resume a type,
    waking the hosts waiting on it; returns whether it was paused before.

    Raises:
        NoTypeTimeout: ``job_type`` has no type timeout (an unknown type).
    """
    if tr.get(layout.activity_timeout_key(job_type)) is None:
        raise NoTypeTimeout(f"job type {job_type!r} has no type timeout: there is no such type", job_type=job_type)
    key = layout.paused_key(job_type)
    was = tr.get(key) is not None
    if paused:
        tr.set(key, b"1")
    else:
        tr.clear(key)
    if was != paused:
        Tally(tr, layout, deferred=False).enqueue(job_type)  # the hosts' pending watch: they look again
    return was


class Controls(NamedTuple):
    """A type's controls as read, and a watch on each (armed at commit)."""

    paused: bool
    timeout: Optional[float]  #: None: no type timeout
    pause_watch: Watch  #: fires when the type is paused or resumed
    timeout_watch: Watch  #: fires when its timeout is set or cleared
    schedule_watch: Watch  #: fires when its schedule is set, changed, removed or fired


@transactional
def watch_controls(tr: Transaction, layout: Layout, job_types: list[JobType]) -> dict[JobType, Controls]:
    """Each of ``job_types``' pause and timeout now, and watches on them and
    on its schedule, read in one round trip: a worker host learns of a
    pause while it claims nothing, renews its leases at a changed timeout's
    pace at once, and fires a new schedule's first tick."""
    keys = [
        key for t in job_types for key in (layout.paused_key(t), layout.activity_timeout_key(t), layout.schedule_key(t))
    ]
    raws = tr.get_many(keys)
    out = {}
    for n, job_type in enumerate(job_types):
        paused, timeout, _ = raws[3 * n : 3 * n + 3]
        out[job_type] = Controls(
            paused is not None,
            None if timeout is None else activity.unpack_timeout(timeout),
            *(tr.watch(k) for k in keys[3 * n : 3 * n + 3]),
        )
    return out


@transactional
def paused_types(tr: Transaction, layout: Layout) -> set[JobType]:
    """The types paused now."""
    prefix = layout.subspace(PAUSED)
    out: set[JobType] = set()
    for kv in tr.snapshot.get_range(prefix, strinc(prefix)):
        try:
            (job_type,) = fdb.tuple.unpack(kv.key, len(prefix))
        except Exception as exc:  # noqa: BLE001 - a corrupt key is skipped
            report_bad_row("paused_key", kv.key, repr(exc)[:80])
            continue
        out.add(job_type)
    return out
