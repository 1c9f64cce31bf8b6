"""fdblayer: one FoundationDB-shaped store interface, three backends.

Principle: code above this package (the jobs data model, the actors) is
written once against ``Database``/``Transaction``/``@transactional`` and runs
unchanged on the embedded SQLite backend, on PostgreSQL or on FoundationDB
(``fdblayer.backends``: ``sqlite_backend``, ``postgres_backend``, ``fdb_backend``; ``open`` picks one
by the URL's scheme). This package knows nothing of actors or supervision.

Usage::

    import fdblayer
    import fdb.tuple

    db = fdblayer.open("sqlite:///var/lib/otpjobs/store.db")

    @fdblayer.transactional
    def incr(tr, name):
        tr.add(fdb.tuple.pack(("counter", name)), (1).to_bytes(8, "little"))

    incr(db, "hits")

Importing this package also makes ``fdb.tuple`` pack ``Versionstamp`` values
without the FoundationDB C library (the bindings' ``Versionstamp.to_bytes``
refers to ``fdb.impl``, which needs libfdb_c); see ``_fdb_tuple_compat``.
"""

from __future__ import annotations

import sys
import types
from typing import Optional

import fdb
import fdb.tuple

from fdblayer.exceptions import (
    ConflictError,
    InvalidStoreURL,
    RetryLimitExceeded,
    StoreError,
    StoreUnavailable,
    is_retryable,
)
from fdblayer.interface import Database, ReadView, Transaction, VersionstampFuture, transactional
from fdblayer.selectors import KeySelector, KeyValue
from fdblayer.urls import DEFAULT_URL, StoreURL, parse_store_url
from fdblayer.watches import Watch

__all__ = [
    "open",
    "transactional",
    "Database",
    "Transaction",
    "ReadView",
    "KeySelector",
    "KeyValue",
    "Watch",
    "VersionstampFuture",
    "StoreError",
    "ConflictError",
    "RetryLimitExceeded",
    "InvalidStoreURL",
    "StoreUnavailable",
    "is_retryable",
    "parse_store_url",
    "StoreURL",
    "DEFAULT_URL",
]


class _NoValue:
    """Stand-in for ``fdb.impl.Value``: nothing is an instance of it."""


def _fdb_tuple_compat() -> None:
    """Let ``fdb.tuple`` pack Versionstamps without loading libfdb_c.

    ``Versionstamp.to_bytes`` checks ``isinstance(v, fdb.impl.Value)``, and
    importing ``fdb.impl`` loads the C library, searching for it first
    (``ldconfig`` and a trial ``gcc`` link where it is missing: some 30 ms and
    three processes, in every process that imports this package). So ``fdb``
    gets a stand-in whose ``Value`` nothing is an instance of; the
    FoundationDB backend's ``fdb.api_version`` imports the real ``fdb.impl``
    when a store is opened, which replaces it (no ``Value`` exists before).
    Left alone when ``fdb.impl`` is already imported.
    """
    if hasattr(fdb, "impl") or "fdb.impl" in sys.modules:
        return
    fdb.impl = types.SimpleNamespace(Value=_NoValue)


_fdb_tuple_compat()


def open(url: Optional[str] = None) -> Database:  # noqa: A001  (mirrors fdb.open)
    """Open the store named by ``url`` (see ``fdblayer.urls`` for the forms).

    Args:
        url: ``sqlite:///path/file.db[?synchronous=FULL|NORMAL]``,
            ``postgresql://user:password@host:port/dbname[?prefix=NAME][&flush=apart]``,
            ``fdb://`` or ``fdb:///path/to/fdb.cluster[?prefix=NAME]``; None
            means ``otpjobs.db`` in the working directory.

    Returns:
        A ``Database`` handle.

    Raises:
        InvalidStoreURL: on a bad URL.
        StoreUnavailable: when the store cannot be opened (e.g. libfdb_c missing).
    """
    parsed = parse_store_url(url)
    if parsed.scheme == "sqlite":
        from fdblayer.backends.sqlite_backend import SqliteDatabase

        assert parsed.path is not None
        return SqliteDatabase(
            parsed.path,
            parsed.params["synchronous"],
            read_only=parsed.params["mode"] == "ro",
        )
    if parsed.scheme == "postgresql":
        from fdblayer.backends.postgres_backend import PostgresDatabase

        assert parsed.path is not None
        return PostgresDatabase(parsed.path, parsed.params["prefix"], flush=parsed.params["flush"])
    from fdblayer.backends.fdb_backend import FdbDatabase

    return FdbDatabase.open(parsed.path, parsed.params["prefix"])
