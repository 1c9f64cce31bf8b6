"""What the monitoring views read of the queue: per-type counts, pages of
jobs by state, one job whole. Read-only, snapshot reads.

Principle: a page costs the rows it shows, not the queue's size, where an
index allows it: the counts come from ``counts``; pending jobs are read in
due order from the PENDING index, running ones from the ACTIVITY index
(least recently active first), all jobs in id order from the DATA rows.
Finished and failed jobs have no index of their own: their pages scan the
DATA rows in id order, at most :data:`MAX_SCAN` of them per page.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from fdblayer.interface import Transaction, strinc, transactional
from fdblayer.jobs import activity, counts, model, pending, rows, type_controls, work
from fdblayer.jobs import failures as failures_index
from fdblayer.jobs.codec import decode_data, unpack_activity_value_or_none
from fdblayer.jobs.exceptions import CorruptValue
from fdblayer.jobs.job import JobState, job_state
from fdblayer.jobs.keys import JobType, Layout
from fdblayer.jobs.work_record import FAILED, claimed_only

__all__ = [
    "STATES",
    "MAX_SCAN",
    "DATA_PREVIEW",
    "types_overview",
    "type_counts",
    "recount",
    "count_rows",
    "list_jobs",
    "job_view",
    "queue_status",
]

#: The states a page may be asked for (``failed``: finished with a failed outcome).
STATES = ("pending", "claimed", "running", "finished", "failed")
#: Rows a page of finished or failed jobs reads at most.
MAX_SCAN = 20_000
#: Characters of a job's data (as JSON) shown in a page; ``job_view`` shows it whole.
DATA_PREVIEW = 200


@transactional
def types_overview(tr: Transaction, layout: Layout, now: float) -> list[dict[str, Any]]:
    """Every type with its activity timeout, whether it is paused, and its counts, in key order."""
    out = []
    paused = type_controls.paused_types(tr, layout)
    for job_type in activity.get_types(tr, layout):
        entry = {
            "type": job_type,
            "timeout": activity.read_type_timeout(tr, layout, job_type),
            "paused": job_type in paused,
        }
        entry.update(type_counts(tr, layout, job_type, now))
        out.append(entry)
    return out


@transactional
def type_counts(tr: Transaction, layout: Layout, job_type: JobType, now: float) -> dict[str, int]:
    """The type's counts as :func:`fdblayer.jobs.counts.shown` says, from
    its counters; a type never counted is counted from its rows first
    (:func:`recount`, in this transaction)."""
    values = counts.stored(tr, layout, job_type)
    if values is None:
        values = recount(tr, layout, job_type)
    return counts.shown(values, counts.scheduled(tr, layout, job_type, now))


def recount(tr: Transaction, layout: Layout, job_type: JobType) -> dict[str, int]:
    """Count the type's rows and set its counters (and mark) to the result."""
    values = count_rows(tr, layout, job_type)
    counts.store(tr, layout, job_type, values)
    return values


def count_rows(tr: Transaction, layout: Layout, job_type: JobType) -> dict[str, int]:
    """What the type's counters should say, from the rows themselves (reads every job)."""
    jobs = model.get_jobs(tr, layout, job_type)
    pending_n = sum(1 for _, state, _ in jobs.values() if state is JobState.PENDING)
    running_n = sum(1 for _, state, _ in jobs.values() if state is JobState.RUNNING)
    finished = [job_id for job_id, (_, state, _) in jobs.items() if state is JobState.FINISHED]
    failed = sum(
        1
        for entry in work.read_many(tr, layout, job_type, finished)
        if entry is not None and entry[2].outcome == FAILED
    )
    held = [job_id for job_id, (_, state, _) in jobs.items() if state is JobState.RUNNING]
    claimed = sum(
        1 for entry in work.read_many(tr, layout, job_type, held) if entry is not None and claimed_only(entry[2])
    )
    return {"jobs": len(jobs), "pending": pending_n, "running": running_n, "claimed": claimed, "failed": failed}


@transactional
def list_jobs(
    tr: Transaction, layout: Layout, job_type: JobType, state: Optional[str], limit: int, skip: int, now: float
) -> tuple[int, list[dict[str, Any]]]:
    """``(total, page)``: the type's jobs in ``state`` (None: all), ``skip`` then ``limit``.

    Pending jobs come in due order, claimed and running ones least
    recently active first, the others in id order.
    """
    tally = type_counts(tr, layout, job_type, now)
    if state == "pending":
        ids = _pending_ids(tr, layout, job_type, None, skip + limit)[skip:]
        return tally["pending"], _views(tr, layout, job_type, ids)
    if state in ("running", "claimed"):
        return tally[state], _scan_held(tr, layout, job_type, state, limit, skip)
    if state is None:
        prefix = layout.data_prefix(job_type)
        found = tr.snapshot.get_range(prefix, strinc(prefix), limit=skip + limit)[skip:]
        ids = [i for i in (_data_id(kv.key, len(prefix)) for kv in found) if i is not None]
        return tally["jobs"], _views(tr, layout, job_type, ids)
    wanted = tally["failed"] if state == "failed" else tally["finished"]
    return wanted, _scan_finished(tr, layout, job_type, state == "failed", limit, skip)


def _scan_held(
    tr: Transaction, layout: Layout, job_type: JobType, state: str, limit: int, skip: int
) -> list[dict[str, Any]]:
    """The views of held jobs in ``state`` (``running``: the handler runs;
    ``claimed``: not yet), least recently active first, reading at most
    :data:`MAX_SCAN` rows of the ACTIVITY index."""
    prefix = layout.activity_prefix(job_type)
    found = tr.snapshot.get_range(prefix, strinc(prefix), limit=MAX_SCAN)
    ids = [row[0] for row in (unpack_activity_value_or_none(kv.key, kv.value) for kv in found) if row]
    out: list[dict[str, Any]] = []
    for start in range(0, len(ids), 500):
        out += [v for v in _views(tr, layout, job_type, ids[start : start + 500]) if v["state"] == state]
        if len(out) >= skip + limit:
            break
    return out[skip : skip + limit]


def _scan_finished(
    tr: Transaction, layout: Layout, job_type: JobType, failed_only: bool, limit: int, skip: int
) -> list[dict[str, Any]]:
    prefix = layout.data_prefix(job_type)
    ids = []
    for kv in tr.snapshot.get_range(prefix, strinc(prefix), limit=MAX_SCAN):
        value = rows.job_val_or_none(kv.key, kv.value)
        job_id = _data_id(kv.key, len(prefix))
        if value is not None and job_id is not None and job_state(value.lock, value.seq) is JobState.FINISHED:
            ids.append(job_id)
    views = [v for v in _views(tr, layout, job_type, ids) if not failed_only or v["outcome"] == FAILED]
    return views[skip : skip + limit]


@transactional
def job_view(tr: Transaction, layout: Layout, job_type: JobType, job_id: str) -> Optional[dict[str, Any]]:
    """One job whole (its data and result too), or None when it does not exist."""
    views = _views(tr, layout, job_type, [job_id], preview=False)
    return views[0] if views else None


@transactional
def queue_status(
    tr: Transaction, layout: Layout, now: float, per_list: int = 10, max_types: int = 100
) -> dict[str, Any]:
    """What a status page shows of the queue, bounded whatever its size.

    Returns ``{"types", "running", "failures", "delayed", "types_cut"}``:
    the first ``max_types`` types with their counts (``types_cut``: how many
    more there are), then at most ``per_list`` job views (each with its
    ``type``) of each list: running jobs, least recently active first; the
    latest failures (by end time, from the index of recent failures:
    see :mod:`fdblayer.jobs.failures`); the next delayed jobs
    (pending, not yet due), soonest first.
    """
    all_types = types_overview(tr, layout, now)
    shown = all_types[:max_types]
    running: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    delayed: list[dict[str, Any]] = []
    for entry in shown:
        job_type = entry["type"]
        if entry.get("running") and len(running) < per_list:
            views = _scan_held(tr, layout, job_type, "running", per_list - len(running), 0)
            running.extend(dict(v, type=job_type) for v in views)
        if entry.get("failed"):
            ids = failures_index.latest_ids(tr, layout, job_type, per_list)
            failed.extend(dict(v, type=job_type) for v in _views(tr, layout, job_type, ids) if v["outcome"] == FAILED)
        if entry.get("scheduled"):
            delayed.extend(dict(v, type=job_type) for v in _next_delayed(tr, layout, job_type, now, per_list))
    failed.sort(key=lambda v: v.get("ended") or 0, reverse=True)
    delayed.sort(key=lambda v: v.get("scheduled_time") or 0)
    return {
        "types": shown,
        "types_cut": len(all_types) - len(shown),
        "running": running,
        "failures": failed[:per_list],
        "delayed": delayed[:per_list],
    }


def _next_delayed(tr: Transaction, layout: Layout, job_type: JobType, now: float, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` pending jobs of ``job_type`` not due yet, soonest first."""
    return _views(tr, layout, job_type, _pending_ids(tr, layout, job_type, int(now), limit))


def _pending_ids(tr: Transaction, layout: Layout, job_type: JobType, after: Optional[int], limit: int) -> list[str]:
    """Ids of the first ``limit`` pending jobs (with ``after``: only those
    scheduled later), priority 0 first, then 1, 2..., each in due order."""
    ids: list[str] = []
    for priority in [0] + pending.priorities(tr, layout, job_type):
        prefix = layout.pending_prefix(job_type, priority)
        begin = prefix if after is None else layout.pending_end(job_type, after, priority)
        keys = tr.snapshot.get_range(begin, strinc(prefix), limit=limit - len(ids))
        ids += [i for i in (_pending_id(kv.key, len(prefix)) for kv in keys) if i is not None]
        if len(ids) >= limit:
            break
    return ids


def _views(
    tr: Transaction, layout: Layout, job_type: JobType, ids: list[str], preview: bool = True
) -> list[dict[str, Any]]:
    """The views of the jobs that exist among ``ids``, in order."""
    out = []
    for job_id, entry in zip(ids, work.read_many_tolerant(tr, layout, job_type, ids), strict=True):
        if entry is None:
            continue
        state, raw_data, record, sched_time, priority = entry
        view = {
            "id": job_id,
            "state": state.value,
            "scheduled_time": sched_time,
            "priority": priority,
            "attempt": record.attempt,
            "max_attempts": record.max_attempts,
            "time_limit": record.time_limit,
            "outcome": record.outcome,
            "progress": record.progress,
            "error": record.error if record.outcome == FAILED else None,
            "last_error": record.error,
            "errors": list(record.errors),
            "worker": record.worker,
            "started": record.started,
            "ended": record.ended,
            "data": _data(raw_data, preview),
        }
        if not preview:
            stored = _data(record.result, False) if record.result is not None else None
            view["result"] = stored.get("result") if isinstance(stored, dict) else None
        out.append(view)
    return out


def _data(raw: bytes, preview: bool) -> Any:
    """Decoded data; in a page, cut to :data:`DATA_PREVIEW` characters of JSON (then a string)."""
    try:
        value = decode_data(raw)
    except CorruptValue:
        return None
    if not preview:
        return value
    text = json.dumps(value, separators=(",", ":"), default=str)
    return value if len(text) <= DATA_PREVIEW else text[:DATA_PREVIEW] + "..."


def _pending_id(key: bytes, prefix_len: int) -> Optional[str]:
    return pending.unpack_pending_key(key, prefix_len)[1]


def _data_id(key: bytes, prefix_len: int) -> Optional[str]:
    return model.job_id_from_key(key, key[:prefix_len])
