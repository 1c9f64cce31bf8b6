"""The public API of permanent jobs (documents), like :mod:`actors.jobs` for the queue.

A document is a permanent job: CouchDB's replicator document, kept in the
store, run by exactly one node of those sharing the store (the node's doc
processor adopts it through the queue, see :mod:`actors.docs.processor`).
Every call is one store transaction; the first argument is a Database or a
Transaction (``fdblayer.open(url)``), no node needs to be reachable::

    rev = put(db, "_replicator", "nightly", {"source": src, "target": dst, "continuous": True})
    doc = get(db, "_replicator", "nightly")        # Doc: state, error_count, info, node, ...
    total, page = list_docs(db, "_replicator", limit=100, skip=0, states=["running"])
    delete(db, "_replicator", "nightly")

States (:data:`STATES`): initializing, error, running, pending, crashing,
completed, failed. Errors: ``InvalidArgument`` and ``EncodingError`` (bad
input, nothing written), ``NotFound``, ``Conflict`` (a named revision is not
current), all :class:`~actors.jobs.JobsError`. :func:`view` gives a
document as a ``_scheduler/docs`` entry.
"""

from __future__ import annotations

from fdblayer.docs import (
    DOCS_TYPE,
    REPLICATOR_DB,
    STATES,
    Conflict,
    Doc,
    DocState,
    EncodingError,
    InvalidArgument,
    NotFound,
    delete,
    get,
    list_docs,
    put,
)
from fdblayer.jobs.exceptions import JobsError

from actors.http import monitoring

__all__ = [
    "DOCS_TYPE",
    "REPLICATOR_DB",
    "STATES",
    "Conflict",
    "Doc",
    "DocState",
    "EncodingError",
    "InvalidArgument",
    "JobsError",
    "NotFound",
    "delete",
    "get",
    "list_docs",
    "put",
    "view",
]


def view(doc: Doc) -> dict:
    """A document as CouchDB's ``_scheduler/docs`` shows it (ISO 8601 times)."""
    return monitoring.doc_view(doc)
