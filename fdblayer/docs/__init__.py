"""The document model: permanent jobs as documents (CouchDB's replicator
documents) in the store, beside the jobs model (:mod:`fdblayer.jobs`) it
builds on.

- ``model``: a document's row, its checks, and put, get, delete and list
  (each adding or removing the document's queue job in the same
  transaction);
- ``leases``: the nodes' hold on documents: accept, renew and release of
  the documents' queue jobs.

This package re-exports ``model``'s public names; it knows nothing of
actors (the node's doc processor, ``actors.docs.processor``, builds on it).
"""

from fdblayer.docs.model import (
    DEFAULT_OWNER_TIMEOUT,
    DOCS_TYPE,
    PREFIX,
    REPLICATOR_DB,
    STATES,
    TERMINAL,
    Conflict,
    Doc,
    DocState,
    EncodingError,
    InvalidArgument,
    Lease,
    NotFound,
    check_body,
    check_names,
    delete,
    ensure_type,
    get,
    list_docs,
    parse_queue_job_id,
    put,
    queue_job_id,
)

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
