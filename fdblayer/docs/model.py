"""Permanent jobs as documents (CouchDB's replicator documents) in the store.

Principle: a document is one row, and who runs it is decided by the job
queue, not by the row. Putting or deleting a document adds or removes a job
of the reserved queue type :data:`DOCS_TYPE` in the same transaction, so a
node owns a document exactly while it holds that queue job as running, and
keeps it by updating the job well within the type's activity timeout. When a
node dies its queue jobs go silent, an activity monitor re-enqueues them and
another node accepts them. This module knows nothing of actors: the node's
doc processor (``actors.docs.processor``) builds on it and on
:mod:`fdblayer.docs.leases` (accept, renew, release).

Data model (``D`` is the packed tuple ``("docs",)``)::

    (D, db_name, doc_id) = msgpack {"rev", "body", "state", "error_count",
                                    "info", "last_updated", "start_time",
                                    "node", "id"}
    queue job (DOCS_TYPE, queue_job_id(db_name, doc_id)) = {"db", "doc_id", "rev"}

``body`` is the document as the user gave it (without ``_id``/``_rev``):
``source``/``target`` (URLs, or objects with a ``url``), ``continuous``, or
a ``handler`` and its ``options``. ``rev`` is ``"<n>-<md5 of body>"``.
``state`` is one of :data:`STATES`; times are seconds since the epoch;
``id`` is the scheduler's job id while the document has one. Bad input
raises the jobs layer's errors (``InvalidArgument``, ``EncodingError``)
before a transaction starts, so it writes nothing.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Union, cast

import fdb.tuple
import msgpack

from fdblayer.interface import MAX_KEY_SIZE, MAX_VALUE_SIZE, Database, Transaction, transactional
from fdblayer.jobs import activity, api
from fdblayer.jobs import model as jobs_model
from fdblayer.jobs.codec import encode_data, report_bad_row
from fdblayer.jobs.exceptions import CorruptValue, EncodingError, InvalidArgument, JobsError, NotFound
from fdblayer.jobs.job import Job, JobState
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from fdblayer.jobs.validate import MAX_SCHED_TIME, check_flag

__all__ = [
    "DOCS_TYPE",
    "DEFAULT_OWNER_TIMEOUT",
    "REPLICATOR_DB",
    "PREFIX",
    "STATES",
    "TERMINAL",
    "DocState",
    "Conflict",
    "Doc",
    "Lease",
    "queue_job_id",
    "parse_queue_job_id",
    "check_body",
    "storable_checkpoint",
    "MAX_CHECKPOINT_SIZE",
    "check_names",
    "put",
    "get",
    "delete",
    "list_docs",
    "ensure_type",
    "InvalidArgument",
    "EncodingError",
    "NotFound",
]

logger = logging.getLogger(__name__)

#: The reserved queue type whose running jobs are the nodes' ownership of docs.
DOCS_TYPE = "_replicator_docs"
#: The activity timeout (seconds) given to DOCS_TYPE when no node set one yet.
DEFAULT_OWNER_TIMEOUT = 30
REPLICATOR_DB = "_replicator"
PREFIX = fdb.tuple.pack(("docs",))
#: Largest encoded document body (the row keeps room for state and info).
MAX_BODY_SIZE = 64_000
MAX_INFO_TEXT = 2_000
#: Largest encoded checkpoint a document's row keeps (a larger one is not
#: kept: the row keeps the last that fitted).
MAX_CHECKPOINT_SIZE = 16_000

Tx = Union[Database, Transaction]


class _Named(str, enum.Enum):
    """A str-valued enum that prints as its value (in messages and logs)."""

    def __str__(self) -> str:
        return str(self.value)


class DocState(_Named):
    """A document's state, as CouchDB's ``_scheduler/docs`` reports it."""

    INITIALIZING = "initializing"
    ERROR = "error"
    RUNNING = "running"
    PENDING = "pending"
    CRASHING = "crashing"
    COMPLETED = "completed"
    FAILED = "failed"


STATES = tuple(s.value for s in DocState)
TERMINAL = (DocState.COMPLETED.value, DocState.FAILED.value)


class Conflict(JobsError):
    """The document's current revision is not the one the caller named."""


@dataclass(frozen=True)
class Doc:
    """One document row, decoded."""

    db_name: str
    doc_id: str
    rev: str
    body: dict[str, Any]
    state: str
    error_count: int = 0
    info: Any = None
    last_updated: Optional[float] = None
    start_time: Optional[float] = None
    node: Optional[str] = None
    job_id: Optional[str] = None
    #: What its job's handler last checkpointed (``ctx.checkpoint``), as
    #: msgpack keeps it: the run on whichever node takes it next resumes there.
    checkpoint: Any = None


@dataclass(frozen=True)
class Lease:
    """A node's hold on a document: the queue job handle and the revision it runs."""

    job: Job
    db_name: str
    doc_id: str
    rev: str


# ------------------------------------------------------------------ checks


def queue_job_id(db_name: str, doc_id: str) -> str:
    """The queue job id of a document (a JSON pair, so any name round-trips)."""
    return json.dumps([db_name, doc_id], separators=(",", ":"), ensure_ascii=False)


def parse_queue_job_id(job_id: str) -> tuple[str, str]:
    db_name, doc_id = json.loads(job_id)
    return db_name, doc_id


def _check_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__}: {value!r:.80}")
    if not value:
        raise InvalidArgument(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is not valid UTF-8: {value!r:.80}") from None
    return value


def check_names(db_name: Any, doc_id: Any) -> None:
    """Check a database name and a doc id.

    Raises:
        InvalidArgument: not non-empty str; a db other than ``_replicator``
            or ``<prefix>/_replicator``; a doc id starting with ``_``; too
            long for a key.
    """
    _check_str(db_name, "database name")
    _check_str(doc_id, "doc id")
    if db_name != REPLICATOR_DB and not db_name.endswith("/" + REPLICATOR_DB):
        raise InvalidArgument(
            f"database name must be {REPLICATOR_DB!r} or end with '/{REPLICATOR_DB}', not {db_name!r:.80}"
        )
    if doc_id.startswith("_"):
        raise InvalidArgument("Only reserved document ids may start with underscore.", job_id=doc_id)
    size = len(_key(db_name, doc_id)) + len(queue_job_id(db_name, doc_id).encode()) + 64
    if size > MAX_KEY_SIZE:
        raise InvalidArgument(
            f"database name and doc id are too long: their longest key would be about "
            f"{size:,} bytes, over the store's limit of {MAX_KEY_SIZE:,}",
            job_id=doc_id,
        )


def _endpoint(value: Any, what: str) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f'{what} must be a URL string or an object with a "url" string')
    return value


def check_body(body: Any) -> dict[str, Any]:
    """Check a document body and return it without ``_id``/``_rev``.

    Raises:
        InvalidArgument: not a dict, no handler and no source/target, a
            field of the wrong type.
        EncodingError: a value that is not JSON-compatible, or too large.
    """
    if not isinstance(body, dict):
        raise InvalidArgument(f"a document must be a JSON object, not {type(body).__name__}")
    doc: dict[str, Any] = {k: v for k, v in body.items() if k not in ("_id", "_rev")}
    handler = doc.get("handler")
    if handler is not None:
        if not isinstance(handler, str) or not all(handler.partition(":")[::2]) or ":" not in handler:
            raise InvalidArgument(f"handler must be 'package.module:callable', not {handler!r:.80}")
    source, target = _endpoint(doc.get("source"), "source"), _endpoint(doc.get("target"), "target")
    if handler is None and not (source and target):
        raise InvalidArgument("a document needs a handler, or a source and a target")
    if not isinstance(doc.get("continuous", False), bool):
        raise InvalidArgument("continuous must be true or false")
    options = doc.get("options")
    if options is not None and not isinstance(options, dict):
        raise InvalidArgument("options must be a JSON object")
    encoded = encode_data(doc)
    if len(encoded) > MAX_BODY_SIZE:
        raise EncodingError(f"document body encodes to {len(encoded)} bytes; at most {MAX_BODY_SIZE} fit")
    return doc


def _check_rev(rev: Any) -> Optional[str]:
    if rev is not None and not isinstance(rev, str):
        raise InvalidArgument(f"rev must be a str, not {type(rev).__name__}")
    return rev


def _new_rev(previous: Optional[str], body: Any) -> str:
    n = int(previous.split("-", 1)[0]) + 1 if previous else 1
    digest = hashlib.md5(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"{n}-{digest}"


def _clean_info(info: Any) -> Any:
    """Info as stored: JSON-compatible, long texts cut."""
    if isinstance(info, str):
        return info[:MAX_INFO_TEXT]
    if isinstance(info, dict):
        return {str(k): _clean_info(v) for k, v in info.items()}
    if isinstance(info, (list, tuple)):
        return [_clean_info(v) for v in info][:100]
    if isinstance(info, float) and not math.isfinite(info):
        return None
    if info is None or isinstance(info, (bool, int, float)):
        return info
    return str(info)[:MAX_INFO_TEXT]


def storable_checkpoint(value: Any) -> bool:
    """Whether a document's row may keep ``value`` as its checkpoint: msgpack
    encodes it (plain data) within :data:`MAX_CHECKPOINT_SIZE` bytes."""
    try:
        return len(msgpack.packb(value, use_bin_type=True)) <= MAX_CHECKPOINT_SIZE
    except Exception:  # noqa: BLE001 - any value msgpack refuses is not storable
        return False


# ------------------------------------------------------------------ rows


def _key(db_name: str, doc_id: str) -> bytes:
    return cast(bytes, fdb.tuple.pack((db_name, doc_id), prefix=PREFIX))


def _decode(db_name: str, doc_id: str, raw: bytes) -> Doc:
    """A stored document row.

    Raises:
        CorruptValue: the row is not one this module writes.
    """
    try:
        v = msgpack.unpackb(raw, raw=False)
        doc = Doc(
            db_name,
            doc_id,
            v["rev"],
            v["body"],
            v["state"],
            v.get("error_count", 0),
            v.get("info"),
            v.get("last_updated"),
            v.get("start_time"),
            v.get("node"),
            v.get("id"),
            v.get("checkpoint"),
        )
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the same corrupt row
        raise CorruptValue(
            f"document {doc_id!r} in {db_name!r} is unreadable ({type(exc).__name__})",
            job_type=DOCS_TYPE,
            job_id=doc_id,
        ) from None
    if not (
        isinstance(doc.rev, str)
        and isinstance(doc.body, dict)
        and isinstance(doc.state, str)
        and isinstance(doc.error_count, int)
    ):
        raise CorruptValue(f"document {doc_id!r} in {db_name!r} has the wrong shape", job_type=DOCS_TYPE, job_id=doc_id)
    return doc


def _decode_or_none(db_name: str, doc_id: str, key: bytes, raw: bytes) -> Optional[Doc]:
    """:func:`_decode`, or None (logged once) for a corrupt row: readers skip it, a put replaces it."""
    try:
        return _decode(db_name, doc_id, raw)
    except CorruptValue as exc:
        report_bad_row("doc", key, exc.message)
        return None


def _encode(doc: Doc) -> bytes:
    raw: bytes = msgpack.packb(
        {
            "rev": doc.rev,
            "body": doc.body,
            "state": doc.state,
            "error_count": doc.error_count,
            "info": doc.info,
            "last_updated": doc.last_updated,
            "start_time": doc.start_time,
            "node": doc.node,
            "id": doc.job_id,
            "checkpoint": doc.checkpoint,
        },
        use_bin_type=True,
    )
    if len(raw) > MAX_VALUE_SIZE:
        raise EncodingError(f"document row of {len(raw)} bytes exceeds the store's value limit")
    return raw


def _read(tr: Transaction, db_name: str, doc_id: str, strict: bool = False) -> Optional[Doc]:
    """The document, or None when missing (or corrupt, unless ``strict``:
    then :class:`CorruptValue`)."""
    key = _key(db_name, doc_id)
    raw = tr.get(key)
    if raw is None:
        return None
    return _decode(db_name, doc_id, bytes(raw)) if strict else _decode_or_none(db_name, doc_id, key, bytes(raw))


def ensure_type(tr: Transaction, timeout: float = DEFAULT_OWNER_TIMEOUT) -> None:
    """Give DOCS_TYPE an activity timeout unless it has one."""
    if activity.read_type_timeout(tr, DEFAULT_LAYOUT, DOCS_TYPE) is None:
        activity.set_type_timeout(tr, DEFAULT_LAYOUT, DOCS_TYPE, timeout)


# ------------------------------------------------------------------ API


def _check_tx(tx: Any) -> None:
    if not isinstance(tx, (Database, Transaction)):
        raise InvalidArgument(f"expected a Database or a Transaction, not {type(tx).__name__}")


def _check_now(now: Any) -> float:
    """A wall time given by a caller (tests): finite seconds an ISO 8601 date can show."""
    if (
        isinstance(now, bool)
        or not isinstance(now, (int, float))
        or not math.isfinite(now)
        or not 0 <= now < MAX_SCHED_TIME
    ):
        raise InvalidArgument(f"now must be seconds since the epoch, not {now!r:.80}")
    return float(now)


def _check_states(states: Any) -> Optional[set[str]]:
    if states is None:
        return None
    if isinstance(states, (str, bytes)) or not isinstance(states, Iterable):
        raise InvalidArgument(f"states must be a list of state names, not {states!r:.80}")
    wanted = list(states)
    if not all(isinstance(state, str) for state in wanted):
        raise InvalidArgument(f"states must be state names (str), not {wanted!r:.80}")
    unknown = sorted(set(wanted) - set(STATES))
    if unknown:
        raise InvalidArgument(f"unknown states {unknown}; choose from {list(STATES)}")
    return set(wanted)


def put(
    tx: Tx,
    db_name: str,
    doc_id: str,
    body: dict[str, Any],
    *,
    rev: Optional[str] = None,
    check_rev: bool = False,
    now: Optional[float] = None,
) -> str:
    """Create or replace a document; its queue job is added (or resubmitted).

    A replaced document starts afresh (state ``initializing``, no errors);
    the node running it notices the new revision and hands it back to the
    queue.

    Args:
        tx: A Database or a Transaction.
        db_name: ``_replicator`` or ``<prefix>/_replicator``.
        doc_id: The document id (not starting with ``_``).
        body: The document (see the module docstring).
        rev: The revision being replaced (CouchDB's ``_rev``); ``_rev`` in
            ``body`` is used when not given.
        check_rev: Refuse with Conflict unless ``rev`` is the current
            revision (None: the document must not exist), as CouchDB does.
        now: Wall time (tests).

    Returns:
        The new revision.

    Raises:
        InvalidArgument, EncodingError: bad input (nothing written).
        Conflict: ``check_rev`` and another revision is current.
    """
    _check_tx(tx)
    check_names(db_name, doc_id)
    check_flag(check_rev, "check_rev")
    now = time.time() if now is None else _check_now(now)
    if rev is None and isinstance(body, dict):
        rev = body.get("_rev")
    _check_rev(rev)
    clean = check_body(body)
    return _put(tx, db_name, doc_id, clean, rev, check_rev, now)


@transactional
def _put(
    tr: Transaction, db_name: str, doc_id: str, body: dict[str, Any], rev: Optional[str], check_rev: bool, now: float
) -> str:
    current = _read(tr, db_name, doc_id)
    current_rev = None if current is None else current.rev
    if check_rev and rev != current_rev:
        raise Conflict("Document update conflict.", job_type=DOCS_TYPE, job_id=doc_id)
    new_rev = _new_rev(current_rev, body)
    tr.set(
        _key(db_name, doc_id),
        _encode(Doc(db_name, doc_id, new_rev, body, DocState.INITIALIZING.value, 0, None, now, None, None, None)),
    )
    ensure_type(tr)
    job_id = queue_job_id(db_name, doc_id)
    api.add(
        tr, DOCS_TYPE, job_id, {"db": db_name, "doc_id": doc_id, "rev": new_rev}, _handed_back_until(tr, job_id, now)
    )
    return new_rev


def _handed_back_until(tr: Transaction, job_id: str, now: float) -> int:
    """The time a pending queue job is due at when it is later than ``now``
    (a stopping node handed the document back: its run may still be
    ending until then, see :func:`leases.release`), else 0 (now)."""
    info = jobs_model.get_job(tr, DEFAULT_LAYOUT, DOCS_TYPE, job_id)
    if info is None or info.state is not JobState.PENDING:
        return 0
    return info.scheduled_time if info.scheduled_time > now else 0


def get(tx: Tx, db_name: str, doc_id: str) -> Doc:
    """Read one document.

    Raises:
        InvalidArgument: bad names.
        NotFound: no such document.
    """
    _check_tx(tx)
    check_names(db_name, doc_id)
    doc = _get(tx, db_name, doc_id)
    if doc is None:
        raise NotFound(f"document {doc_id!r} not found in {db_name!r}", job_type=DOCS_TYPE, job_id=doc_id)
    return doc


@transactional
def _get(tr: Transaction, db_name: str, doc_id: str) -> Optional[Doc]:
    return _read(tr, db_name, doc_id, strict=True)


def delete(tx: Tx, db_name: str, doc_id: str, *, rev: Optional[str] = None) -> str:
    """Delete a document and its queue job (the owner stops running it).

    A queue job that is running, or handed back due later, stays until its
    old run has surely ended (the owner finds the document gone at its next
    renewal and puts the job back due then; the accept that takes it then
    removes it): a document created again meanwhile under the same id is
    not run beside that old run.

    Args:
        rev: When given, it must be the current revision (else Conflict).

    Returns:
        The deletion's revision.

    Raises:
        InvalidArgument: bad names.
        NotFound: no such document.
        Conflict: ``rev`` is not current.
    """
    _check_tx(tx)
    check_names(db_name, doc_id)
    return _delete(tx, db_name, doc_id, _check_rev(rev))


@transactional
def _delete(tr: Transaction, db_name: str, doc_id: str, rev: Optional[str]) -> str:
    current = _read(tr, db_name, doc_id)
    if current is None:
        raise NotFound(f"document {doc_id!r} not found in {db_name!r}", job_type=DOCS_TYPE, job_id=doc_id)
    if rev is not None and rev != current.rev:
        raise Conflict("Document update conflict.", job_type=DOCS_TYPE, job_id=doc_id)
    tr.clear(_key(db_name, doc_id))
    job_id = queue_job_id(db_name, doc_id)
    info = jobs_model.get_job(tr, DEFAULT_LAYOUT, DOCS_TYPE, job_id)
    if info is None:
        logger.warning("doc_job_missing doc=%s/%s", db_name, doc_id)
    elif info.state is JobState.RUNNING or _handed_back_until(tr, job_id, time.time()):
        pass  # its old run may still be ending: the queue job waits for it (the owner, or accept, removes it)
    else:
        api.remove(tr, DOCS_TYPE, job_id)
    return _new_rev(current.rev, None)


def list_docs(
    tx: Tx,
    db_name: Optional[str] = None,
    *,
    limit: Optional[int] = None,
    skip: int = 0,
    states: Optional[Iterable[str]] = None,
) -> tuple[int, list[Doc]]:
    """List documents sorted by database then doc id.

    Args:
        db_name: Only this database (None: all).
        limit: At most this many (None: all).
        skip: Skip this many first.
        states: Only documents in these states.

    Returns:
        ``(total, page)``: how many match, and the page.

    Raises:
        InvalidArgument: a bad argument.
    """
    _check_tx(tx)
    if db_name is not None:
        _check_str(db_name, "database name")
    for value, what, optional in ((limit, "limit", True), (skip, "skip", False)):
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"{what} must be an int >= 0, not {value!r:.80}")
    return _list(tx, db_name, limit, skip, _check_states(states))


@transactional
def _list(
    tr: Transaction, db_name: Optional[str], limit: Optional[int], skip: int, wanted: Optional[set[str]]
) -> tuple[int, list[Doc]]:
    prefix = PREFIX if db_name is None else fdb.tuple.pack((db_name,), prefix=PREFIX)
    total, page = 0, []
    end = None if limit is None else skip + limit
    for key, raw in tr.get_range_startswith(prefix):
        if wanted is not None or (skip <= total and (end is None or total < end)):
            try:
                name, doc_id = fdb.tuple.unpack(key, len(PREFIX))
            except Exception as exc:  # noqa: BLE001 - a corrupt key is skipped
                report_bad_row("doc_key", key, repr(exc)[:80])
                continue
            doc = _decode_or_none(name, doc_id, key, bytes(raw))
            if doc is None:
                continue
            if wanted is not None and doc.state not in wanted:
                continue
            if skip <= total and (end is None or total < end):
                page.append(doc)
        total += 1
    return total, page
