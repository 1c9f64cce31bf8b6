"""The built-in ``replicate`` job kind: copy a key range between two stores.

Principle: each batch is one target transaction that reads the checkpoint,
copies the next rows from the source (only those that differ), clears the
target rows the source no longer has, and writes the new checkpoint. A
batch and its checkpoint commit together, so a job killed at any moment
resumes exactly where its last batch ended and never copies a row twice
in one pass; two instances racing on one target conflict and serialize.

Data model, in the target (never replicated: it sits at ``b"\\xfe"``, past
the default range)::

    (CHECKPOINT_PREFIX, job_id) = msgpack {session_id, pass, last_key,
        pass_complete, seq, docs_read, docs_written, doc_write_failures,
        history: [{session_id, start_seq, end_seq, docs_read, docs_written,
                   doc_write_failures}, ...] newest first, at most 50}

``seq`` counts source rows processed over all passes (the seed's
source_seq); ``checkpointed_source_seq`` is the seq of the last committed
batch. Options: ``jobs`` (true: the jobs layer's data only), ``prefix``
(a tuple, as a list, whose packed form bounds the range), ``batch_size``
(500), ``batch_delay`` (seconds between batches, 0), ``poll_interval``
(seconds between passes of a continuous job, 5).
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import fdb.tuple
import msgpack

import fdblayer
from fdblayer.exceptions import InvalidStoreURL, KeyOutsideLegalRange, KeyTooLarge, StoreTypeError, ValueTooLarge
from fdblayer.interface import strinc
from fdblayer.urls import parse_store_url

log = logging.getLogger(__name__)

CHECKPOINT_PREFIX = b"\xfe" + fdb.tuple.pack(("_local", "otpjobs.replicate"))
DEFAULT_END = b"\xfe"
JOBS_PREFIX = fdb.tuple.pack((51,))
MAX_BATCH_BYTES = 2_000_000
MAX_SESSIONS = 50


def key_range(options: dict) -> tuple[bytes, bytes]:
    """The ``[begin, end)`` a job copies, from its options."""
    if options.get("jobs"):
        return JOBS_PREFIX, strinc(JOBS_PREFIX)
    prefix = options.get("prefix")
    if prefix:
        packed = fdb.tuple.pack(tuple(prefix))
        return packed, strinc(packed)
    return b"", DEFAULT_END


def checkpoint_key(job_id: str) -> bytes:
    return CHECKPOINT_PREFIX + fdb.tuple.pack((job_id,))


def new_checkpoint() -> dict:
    return {
        "session_id": None,
        "pass": 0,
        "last_key": None,
        "pass_complete": False,
        "seq": 0,
        "docs_read": 0,
        "docs_written": 0,
        "doc_write_failures": 0,
        "history": [],
    }


@fdblayer.transactional
def read_checkpoint(tr: Any, job_id: str) -> dict | None:
    raw = tr.get(checkpoint_key(job_id))
    return None if raw is None else msgpack.unpackb(raw)


@fdblayer.transactional
def _read_rows(tr: Any, begin: bytes, end: bytes, limit: int) -> list:
    return [(bytes(kv.key), bytes(kv.value)) for kv in tr.get_range(begin, end, limit=limit)]


@fdblayer.transactional
def copy_batch(
    tr: Any, source: Any, job_id: str, session: str, begin: bytes, end: bytes, batch_size: int
) -> tuple[dict, int, int, int]:
    """Copy one batch and checkpoint it in the same target transaction.

    Returns:
        (checkpoint, rows read, rows written or cleared, write failures).
    """
    ckey = checkpoint_key(job_id)
    raw = tr.get(ckey)
    cp = new_checkpoint() if raw is None else msgpack.unpackb(raw)
    if cp["pass_complete"]:
        cp.update({"pass": cp["pass"] + 1, "last_key": None, "pass_complete": False})
    start = begin if cp["last_key"] is None else cp["last_key"] + b"\x00"
    rows = _read_rows(source, start, end, batch_size)
    full = len(rows) == batch_size
    size = 0
    for i, (k, v) in enumerate(rows):
        size += len(k) + len(v)
        if size > MAX_BATCH_BYTES and i > 0:
            rows, full = rows[:i], True
            break
    covered_end = rows[-1][0] + b"\x00" if full else end
    existing = {bytes(kv.key): bytes(kv.value) for kv in tr.get_range(start, covered_end)}
    written = failures = 0
    for key, value in rows:
        if existing.pop(key, None) != value:
            try:
                tr.set(key, value)
                written += 1
            except (KeyOutsideLegalRange, KeyTooLarge, StoreTypeError, ValueTooLarge) as exc:
                log.warning("job_write_failed job=%r key=%r reason=%s", job_id, key[:80], exc)
                failures += 1
    for key in existing:
        tr.clear(key)
        written += 1
    cp["last_key"] = rows[-1][0] if full else None
    cp["pass_complete"] = not full
    cp["seq"] += len(rows)
    cp["docs_read"] += len(rows)
    cp["docs_written"] += written
    cp["doc_write_failures"] += failures
    _record_session(cp, session, len(rows), written, failures)
    tr.set(ckey, msgpack.packb(cp))
    return cp, len(rows), written, failures


def _record_session(cp: dict, session: str, read: int, written: int, failures: int) -> None:
    history = cp["history"]
    if not history or history[0]["session_id"] != session:
        history.insert(
            0,
            {
                "session_id": session,
                "start_seq": cp["seq"] - read,
                "end_seq": cp["seq"] - read,
                "docs_read": 0,
                "docs_written": 0,
                "doc_write_failures": 0,
            },
        )
        del history[MAX_SESSIONS:]
        cp["session_id"] = session
    entry = history[0]
    entry["end_seq"] = cp["seq"]
    entry["docs_read"] += read
    entry["docs_written"] += written
    entry["doc_write_failures"] += failures


def missing_source(url: Any) -> str | None:
    """Why the store ``url`` cannot be a replication's source, or None.

    Only what can be told without opening it: a SQLite file that does not
    exist (opening it would create an empty store and copy nothing).
    """
    try:
        parsed = parse_store_url(url)
    except InvalidStoreURL:
        return None  # JobSpec's own checks say what is wrong with it
    if parsed.scheme == "sqlite" and parsed.path and not os.path.exists(parsed.path):
        return f"no such store: {parsed.path} does not exist"
    return None


def replicate(ctx: Any) -> None:
    """The handler of jobs with ``source`` and ``target`` (see the module docstring)."""
    options = ctx.options
    begin, end = key_range(options)
    batch_size = int(options.get("batch_size", 500))
    batch_delay = float(options.get("batch_delay", 0))
    poll_interval = float(options.get("poll_interval", 5))
    session = uuid.uuid4().hex
    why = missing_source(ctx.source)
    if why:  # opening it would create an empty store, and copy nothing from it
        raise FileNotFoundError(f"source {ctx.source}: {why}")
    source = fdblayer.open(ctx.source)
    target = fdblayer.open(ctx.target)
    stats = {"docs_read": 0, "docs_written": 0, "doc_write_failures": 0}
    try:
        while not ctx.stopping:
            cp, read, written, failures = copy_batch(target, source, ctx.job_id, session, begin, end, batch_size)
            stats["docs_read"] += read
            stats["docs_written"] += written
            stats["doc_write_failures"] += failures
            ctx.report(source_seq=cp["seq"], checkpointed_source_seq=cp["seq"], **stats)
            ctx.checkpoint({"session_id": session, "seq": cp["seq"], "pass": cp["pass"]})
            if cp["pass_complete"]:
                if not ctx.continuous:
                    return
                if ctx.wait(poll_interval):
                    return
            elif batch_delay and ctx.wait(batch_delay):
                return
    finally:
        for db in (source, target):
            close = getattr(db, "close", None)
            if close is not None:
                close()
