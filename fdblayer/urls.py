"""Store URLs: which backend, which file or cluster, which settings.

Principle: one string names a store everywhere (CLI, config, replication
jobs). Accepted forms::

    sqlite:////abs/path/file.db      absolute path (four slashes, as SQLAlchemy)
    sqlite:///rel/file.db            relative to the working directory
    sqlite:///./rel/file.db          relative to the working directory
    sqlite:rel/file.db               relative to the working directory
    ...?synchronous=FULL|NORMAL      durability (default FULL); &mode=ro for read-only
    fdb://                           FoundationDB, default cluster file
    fdb:///path/to/fdb.cluster       FoundationDB, that cluster file
    ...?prefix=NAME                  the layer's subspace (default "otpjobs")
    postgresql://user:pw@host:port/db   PostgreSQL (also postgres://); other
                                     query parameters go to libpq (sslmode=...)
    ...?prefix=NAME                  the tables' prefix (default "otpjobs"), so
                                     several stores can share one database
    ...?flush=apart                  commits flushed after the commit order lock
                                     is released (default flush=commit: under it;
                                     see ``fdblayer.backends.postgres_backend``)

No URL means ``sqlite:///./otpjobs.db``: the file ``otpjobs.db`` in the
working directory. Anything else raises ``InvalidStoreURL``.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from typing import Dict, Optional

from fdblayer.exceptions import InvalidStoreURL

__all__ = ["StoreURL", "parse_store_url", "redact_url", "DEFAULT_URL"]

DEFAULT_URL = "sqlite:///./otpjobs.db"
_SQLITE_PARAMS = {"synchronous": ("FULL", "NORMAL"), "mode": ("rw", "ro")}
_FDB_PARAMS = ("prefix",)
#: Where a PostgreSQL commit waits for its WAL flush (``flush=``).
PG_FLUSH_MODES = ("commit", "apart")


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL.

    Attributes:
        scheme: ``"sqlite"``, ``"fdb"`` or ``"postgresql"``.
        path: the SQLite file (absolute), the cluster file (None: default) or
            the libpq connection URL (without ``prefix``).
        params: the query parameters, validated and normalised.
    """

    scheme: str
    path: Optional[str]
    params: Dict[str, str] = field(default_factory=dict)


def _single_params(url: str, query: str) -> Dict[str, str]:
    params: Dict[str, str] = {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if name in params:
            raise InvalidStoreURL(f"store URL {url!r}: parameter {name!r} given twice")
        params[name] = value
    return params


def _sqlite_path(url: str, rest: str) -> str:
    """The file of ``sqlite:`` URLs, read as SQLAlchemy does: after
    ``sqlite://`` comes an empty host, then ``/`` and the path, so three
    slashes start a relative path and four an absolute one."""
    if rest.startswith("//"):
        netloc, _, path = rest[2:].partition("/")
        if netloc not in ("", "localhost"):
            raise InvalidStoreURL(f"store URL {url!r}: an SQLite store has no host ({netloc!r})")
    else:
        path = rest
    path = urllib.parse.unquote(path)
    if not path or path.endswith("/"):
        raise InvalidStoreURL(f"store URL {url!r}: no database file name")
    return os.path.abspath(path)


def _parse_sqlite(url: str, rest: str, params: Dict[str, str]) -> StoreURL:
    for name, value in params.items():
        allowed = _SQLITE_PARAMS.get(name)
        if allowed is None:
            raise InvalidStoreURL(f"store URL {url!r}: unknown parameter {name!r} (known: {', '.join(_SQLITE_PARAMS)})")
        normal = value.upper() if name == "synchronous" else value.lower()
        if normal not in allowed:
            raise InvalidStoreURL(f"store URL {url!r}: {name}={value!r} is not one of {', '.join(allowed)}")
        params[name] = normal
    params.setdefault("synchronous", "FULL")
    params.setdefault("mode", "rw")
    return StoreURL("sqlite", _sqlite_path(url, rest), params)


def _parse_fdb(url: str, rest: str, params: Dict[str, str]) -> StoreURL:
    for name in params:
        if name not in _FDB_PARAMS:
            raise InvalidStoreURL(f"store URL {url!r}: unknown parameter {name!r} (known: prefix)")
    if "prefix" in params and not params["prefix"]:
        raise InvalidStoreURL(f"store URL {url!r}: empty prefix")
    params.setdefault("prefix", "otpjobs")
    if rest in ("", "//"):
        return StoreURL("fdb", None, params)
    if not rest.startswith("//"):
        raise InvalidStoreURL(f"store URL {url!r}: expected fdb:// or fdb:///path/to/fdb.cluster")
    netloc, _, path = rest[2:].partition("/")
    if netloc:
        raise InvalidStoreURL(f"store URL {url!r}: give the cluster file path, not a host")
    return StoreURL("fdb", "/" + urllib.parse.unquote(path), params)


def _parse_postgres(url: str, scheme: str, rest: str, query: str) -> StoreURL:
    """A PostgreSQL URL: libpq's own, less our ``prefix`` and ``flush`` parameters."""
    from fdblayer.backends.postgres_sql import check_prefix  # psycopg is imported lazily there

    if not rest.startswith("//"):
        raise InvalidStoreURL(f"store URL {url!r}: expected {scheme}://[user[:password]@]host[:port]/dbname")
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    prefixes = [value for name, value in pairs if name == "prefix"]
    if len(prefixes) > 1:
        raise InvalidStoreURL(f"store URL {url!r}: parameter 'prefix' given twice")
    prefix = check_prefix(prefixes[0] if prefixes else "otpjobs", url)
    flushes = [value for name, value in pairs if name == "flush"]
    if len(flushes) > 1 or flushes and flushes[0] not in PG_FLUSH_MODES:
        raise InvalidStoreURL(f"store URL {url!r}: flush must be given once, as one of {', '.join(PG_FLUSH_MODES)}")
    rest_query = urllib.parse.urlencode([(n, v) for n, v in pairs if n not in ("prefix", "flush")])
    conninfo = f"postgresql:{rest}" + (f"?{rest_query}" if rest_query else "")
    return StoreURL("postgresql", conninfo, {"prefix": prefix, "flush": flushes[0] if flushes else "commit"})


def parse_store_url(url: Optional[str] = None) -> StoreURL:
    """Parse and validate a store URL.

    Args:
        url: the URL, or None for the default (``otpjobs.db`` in the working directory).

    Returns:
        The parsed ``StoreURL``.

    Raises:
        InvalidStoreURL: on an unknown scheme, a missing path or a bad parameter.
    """
    if url is None:
        url = DEFAULT_URL
    if not isinstance(url, str):
        raise InvalidStoreURL(f"store URL must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition(":")
    if not sep:
        raise InvalidStoreURL(f"store URL {url!r}: missing scheme (sqlite: or fdb:)")
    rest, _, query = rest.partition("?")
    params = _single_params(url, query)
    scheme = scheme.lower()
    if scheme == "sqlite":
        return _parse_sqlite(url, rest, params)
    if scheme == "fdb":
        return _parse_fdb(url, rest, params)
    if scheme in ("postgresql", "postgres"):
        return _parse_postgres(url, scheme, rest, query)
    raise InvalidStoreURL(f"store URL {url!r}: unknown scheme {scheme!r} (use sqlite:, postgresql: or fdb:)")


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for logs and messages)."""
    if not isinstance(url, str):
        return repr(url)
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[2]}"))
