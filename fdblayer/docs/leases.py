"""The nodes' hold on ``_replicator`` documents: a node takes a pending
document (:func:`accept`), keeps it by renewing its lease (:func:`renew`,
in batches) and gives it back (:func:`release`). A document's lease is its
job of :data:`~fdblayer.docs.DOCS_TYPE` in the jobs model; the documents
themselves are :mod:`fdblayer.docs`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Optional

from fdblayer.docs.model import (
    DOCS_TYPE,
    MAX_CHECKPOINT_SIZE,
    Doc,
    DocState,
    Lease,
    _clean_info,
    _encode,
    _key,
    _Named,
    _read,
    parse_queue_job_id,
    storable_checkpoint,
)
from fdblayer.interface import Database, Transaction, transactional
from fdblayer.jobs import activity, model, pending, transitions
from fdblayer.jobs.codec import decode_data
from fdblayer.jobs.exceptions import EncodingError, InvalidArgument
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from fdblayer.jobs.job import JobState
from fdblayer.jobs.validate import MAX_SCHED_TIME, check_optional_sched_time, check_sched_time
from fdblayer.watches import Watch

__all__ = [
    "accept",
    "renew",
    "release",
    "held_by_node",
    "bring_forward",
    "RenewOutcome",
    "KEPT",
    "DONE",
    "CHANGED",
    "LOST",
    "RENEW_BATCH",
]

logger = logging.getLogger("fdblayer.docs")


@transactional
def accept(tr: Transaction, node: str, now: float) -> tuple[Optional[tuple[Lease, Doc]], Optional[Watch]]:
    """Take one pending document due at ``now``, or arm a watch on the next enqueue.

    The document's row is marked ``initializing`` on ``node``. A document
    handed back by a stopping node is due only once that node's run of it
    has surely ended (:func:`release`'s ``not_before``).

    Returns:
        ``((lease, doc), None)`` when one was taken, ``(None, watch)`` when
        none is due (wait on the watch, armed at commit; a document due
        later is the periodic retry's), ``(None, None)`` when the taken job
        had no document (a deleted one's, left to wait for its old run: it
        was removed; try again).
    """
    due_at = min(int(now), MAX_SCHED_TIME)
    found = model.accept(tr, DEFAULT_LAYOUT, DOCS_TYPE, due_at, False)
    if found is None:
        return None, pending.watch_pending(tr, DEFAULT_LAYOUT, DOCS_TYPE)
    job, _ = found
    db_name, doc_id = parse_queue_job_id(job.id)
    doc = _read(tr, db_name, doc_id)
    if doc is None:
        logger.warning("doc_job_orphaned doc=%s/%s action=removed", db_name, doc_id)
        model.remove(tr, DEFAULT_LAYOUT, DOCS_TYPE, job.id)  # a deleted document's: it waited for its old run
        return None, None
    doc = Doc(
        db_name,
        doc_id,
        doc.rev,
        doc.body,
        DocState.INITIALIZING.value,
        doc.error_count,
        None,
        now,
        doc.start_time,
        node,
        None,
        doc.checkpoint,
    )
    tr.set(_key(db_name, doc_id), _encode(doc))
    return (Lease(job, db_name, doc_id, doc.rev), doc), None


class RenewOutcome(_Named):
    """What :func:`renew` did with one lease."""

    KEPT = "kept"
    DONE = "done"
    CHANGED = "changed"
    LOST = "lost"


KEPT, DONE, CHANGED, LOST = RenewOutcome.KEPT, RenewOutcome.DONE, RenewOutcome.CHANGED, RenewOutcome.LOST


def renew(
    db: Database,
    leases: list[Lease],
    states: dict[str, Any],
    done: set[str],
    now: float,
    timeout: Optional[float] = None,
    not_before: Optional[int] = None,
) -> dict[str, tuple[RenewOutcome, Optional[Lease]]]:
    """Keep a node's documents and record their new states, in a few transactions.

    For each lease (by queue job id):

    * its queue job is gone or held by another lock: ``LOST``;
    * the document was replaced (resubmitted or a new revision): the queue
      job is finished, which puts it back in the queue (``CHANGED``), due
      no earlier than ``not_before`` (epoch seconds: when this node's run
      of the old revision has surely ended; None: its scheduled time);
    * else its state fields in ``states[job_id]`` (a dict of ``state``,
      ``error_count``, ``info``, ``id``, ``start_time``) are written (with
      ``last_updated`` = now when the state changed), and the queue job is
      updated (``KEPT``, with the new lease) or, if its id is in ``done``,
      finished (``DONE``).

    Leases are renewed in transactions of :data:`RENEW_BATCH` (each job
    updated in one transaction gets its own activity row: the queue gives
    each a distinct user version of the commit's versionstamp).

    ``timeout`` bounds each batch's retries (seconds; None: the
    ``transactional`` default), so an unreachable store is known in time.

    Returns:
        ``{queue job id: (outcome, lease or None)}``.

    Raises:
        RetryLimitExceeded: a batch could not commit within ``timeout``.
    """
    if not isinstance(db, Database):
        raise InvalidArgument(f"renew takes a Database, not {type(db).__name__}")
    check_optional_sched_time(not_before, "not_before")
    batch = _renew_batch if timeout is None else transactional(_renew_batch.__wrapped__, timeout=timeout)
    outcomes: dict[str, tuple[RenewOutcome, Optional[Lease]]] = {}
    for start in range(0, len(leases), RENEW_BATCH):
        outcomes.update(batch(db, leases[start : start + RENEW_BATCH], states, done, now, not_before))
    return outcomes


#: Leases renewed per transaction: large enough that a node with thousands
#: of documents commits a few transactions per tick, small enough that no
#: commit holds the store's write lock for long.
RENEW_BATCH = 200


@transactional
def _renew_batch(
    tr: Transaction,
    leases: list[Lease],
    states: dict[str, Any],
    done: set[str],
    now: float,
    not_before: Optional[int] = None,
) -> dict[str, tuple[RenewOutcome, Optional[Lease]]]:
    _read_ahead(tr, leases)
    return {
        lease.job.id: _renew_one(tr, lease, states.get(lease.job.id), lease.job.id in done, now, not_before)
        for lease in leases
    }


def _read_ahead(tr: Transaction, leases: list[Lease]) -> None:
    """Read what renewing ``leases`` reads (each queue job's row and work
    record, each document), in one ``get_many``: on PostgreSQL one round trip
    for the batch where the renewals one by one would take three a lease, so
    a node's renewals keep up with thousands of documents on a loaded
    machine. Each renewal's own reads are then answered from it."""
    ids = [lease.job.id for lease in leases]
    tr.get_many(
        [DEFAULT_LAYOUT.data_key(DOCS_TYPE, i) for i in ids]
        + [DEFAULT_LAYOUT.work_key(DOCS_TYPE, i) for i in ids]
        + [_key(lease.db_name, lease.doc_id) for lease in leases]
    )


@transactional
def _renew_one(
    tr: Transaction,
    lease: Lease,
    fields: Optional[dict[str, Any]],
    finished: bool,
    now: float,
    not_before: Optional[int] = None,
) -> tuple[RenewOutcome, Optional[Lease]]:
    job = lease.job
    (held,) = transitions.held(tr, DEFAULT_LAYOUT, [job])
    if held is None:
        return LOST, None
    info = held.value
    doc = _read(tr, lease.db_name, lease.doc_id)
    if doc is None or doc.rev != lease.rev or info.resubmit:
        due = info.sched_time if not_before is None else max(info.sched_time, not_before)
        if not info.resubmit or due != info.sched_time:
            model.resubmit(tr, DEFAULT_LAYOUT, DOCS_TYPE, job.id, due)
        model.finish(tr, DEFAULT_LAYOUT, job, None)
        return CHANGED, None
    if fields:
        changed = fields.get("state", doc.state) != doc.state
        before = doc
        doc = Doc(
            doc.db_name,
            doc.doc_id,
            doc.rev,
            doc.body,
            fields.get("state", doc.state),
            fields.get("error_count", doc.error_count),
            _clean_info(fields.get("info", doc.info)),
            now if changed else doc.last_updated,
            fields.get("start_time", doc.start_time),
            doc.node,
            fields.get("id", doc.job_id),
            _checkpoint(lease, fields, doc.checkpoint),
        )
        tr.set(_key(doc.db_name, doc.doc_id), _encode_keeping(doc, before.checkpoint))
    if finished:
        model.finish(tr, DEFAULT_LAYOUT, job, None)
        return DONE, None
    return KEPT, Lease(model.update_held(tr, DEFAULT_LAYOUT, held, None), lease.db_name, lease.doc_id, lease.rev)


#: A running document's ``info`` when the handler's reported stats would not fit its row.
INFO_TOO_LARGE = {"error": "the reported stats are too large to keep"}


def _encode_keeping(doc: Doc, kept: Any) -> bytes:
    """The row of ``doc``, within the store's value limit whatever the
    handler reported (a renewal must never fail for a handler's values):
    if it is too large, with :data:`INFO_TOO_LARGE` as its info (stats are
    for display, a checkpoint is the run's progress), then also with the
    checkpoint ``kept`` instead of its new one."""
    for candidate in (doc, replace(doc, info=INFO_TOO_LARGE), replace(doc, checkpoint=kept, info=INFO_TOO_LARGE)):
        try:
            raw = _encode(candidate)
        except EncodingError:
            continue
        if candidate is not doc:
            logger.warning("doc_values_not_kept doc=%s/%s reason=row_too_large", doc.db_name, doc.doc_id)
        return raw
    return _encode(replace(doc, checkpoint=None, info=INFO_TOO_LARGE))  # the body alone fits: put checked it


def _checkpoint(lease: Lease, fields: dict[str, Any], kept: Any) -> Any:
    """The checkpoint a renewal writes: ``fields``' new one when a row may
    keep it (:func:`~fdblayer.docs.model.storable_checkpoint`), else the
    one ``kept`` (a refused one is logged: the row keeps the last that fitted)."""
    if "checkpoint" not in fields or fields["checkpoint"] == kept:
        return kept
    if storable_checkpoint(fields["checkpoint"]):
        return fields["checkpoint"]
    logger.warning(
        "doc_checkpoint_not_kept doc=%s/%s reason=not_plain_data_or_over_%d_bytes",
        lease.db_name,
        lease.doc_id,
        MAX_CHECKPOINT_SIZE,
    )
    return kept


@transactional
def release(tr: Transaction, leases: list[Lease], not_before: Optional[int] = None) -> list[str]:
    """Hand documents back to the queue (a node stopping cleanly): each queue
    job still held by its lease is put back in the pending queue, due at
    ``not_before`` (epoch seconds; None keeps its scheduled time). A node
    that still runs the documents while it stops passes the time by which
    those runs have surely ended: no node accepts them before.

    Returns:
        The queue job ids released.
    """
    check_optional_sched_time(not_before, "not_before")
    released = []
    for lease in leases:
        info = model.get_job(tr, DEFAULT_LAYOUT, DOCS_TYPE, lease.job.id)
        if info is None or info.lock != lease.job.lock:
            continue
        model.resubmit(tr, DEFAULT_LAYOUT, DOCS_TYPE, lease.job.id, not_before)
        model.finish(tr, DEFAULT_LAYOUT, lease.job, None)
        released.append(lease.job.id)
    return released


@transactional
def bring_forward(tr: Transaction, job_ids: list[str], due: int) -> list[str]:
    """Make the pending document jobs among ``job_ids`` that are due later
    than ``due`` (epoch seconds) due then: a replaced document put back in
    the queue due late (:func:`renew`'s ``not_before``, a bound that holds
    even if its old run is never heard of again), once that run was told
    to stop. Jobs running or finished, gone or due earlier are left alone.

    Returns:
        The queue job ids brought forward.
    """
    check_sched_time(due, "due")
    moved = []
    for job_id in job_ids:
        info = model.get_job(tr, DEFAULT_LAYOUT, DOCS_TYPE, job_id)
        if info is not None and info.state is JobState.PENDING and info.scheduled_time > due:
            model.resubmit(tr, DEFAULT_LAYOUT, DOCS_TYPE, job_id, due)
            moved.append(job_id)
    return moved


@transactional
def held_by_node(tr: Transaction, node: str) -> list[tuple[Lease, Doc]]:
    """The documents ``node`` holds now: the running queue jobs of
    :data:`DOCS_TYPE` whose document row names ``node``, each as a lease
    (with the lock it runs under and the revision it was accepted at) and
    the document. A restarted doc processor of that node takes them back as
    they are: their jobs run on, where waiting for their leases to expire
    would stop them for the owner timeout."""
    out = []
    for held in activity.running_jobs(tr, DEFAULT_LAYOUT, DOCS_TYPE):
        try:
            db_name, doc_id = parse_queue_job_id(held.job.id)
            rev = decode_data(held.value.data)["rev"]
        except Exception:  # noqa: BLE001 - not a lease this layer wrote: left to its timeout
            continue
        doc = _read(tr, db_name, doc_id)
        if doc is not None and doc.node == node and isinstance(rev, str):
            out.append((Lease(held.job, db_name, doc_id, rev), doc))
    return out
