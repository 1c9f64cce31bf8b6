"""What a job may run and which stores it may touch: the node's job policy.

Principle: a job spec names code (``handler``) and stores (``source``,
``target``) that a node process will import and open with the node user's
rights, so whoever may submit a job (with no admin configured, every
local user) must not choose them freely. The node's config file says what
is allowed, and the HTTP API checks every job and replication document
against it before anything is added or written (a refusal changes
nothing). Pure: no actors, no store; the store URLs are only parsed.

* ``[replicator] handlers``: ``package.module`` allows every attribute of
  that module, ``package.module:callable`` exactly that one. The built-in
  ``replicate`` handler (:data:`~actors.names.REPLICATE_HANDLER`),
  and a job that names no handler (a replication), are always allowed.
* ``[replicator] stores``: directories and URL prefixes. A ``sqlite:`` URL
  is allowed only when the real path of the file it opens (after ``..``
  and symlinks, :func:`os.path.realpath`) lies inside one of the
  directories; any other URL (``fdb://``, ``postgresql://``...) only when
  it starts with one of the URL prefixes, at a boundary (the prefix ends
  with ``/`` or ``?``, or the URL goes on with one) and with no ``..``
  segment after it (a prefix ending in ``?`` also matches the URL without
  it). Empty: the directory holding the node's SQLite store (for a node on
  FoundationDB, its own cluster: ``fdb://?`` for ``fdb://``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from urllib.parse import unquote

from actors.errors import ActorsError
from actors.settings.config import Config
from actors.settings.schema import split_list
from actors.names import REPLICATE_HANDLER
from fdblayer.exceptions import InvalidStoreURL
from fdblayer.urls import StoreURL, parse_store_url

#: The spec fields naming stores.
STORE_FIELDS = ("source", "target")


class Forbidden(ActorsError, ValueError):
    """A job names a handler or a store the node's policy does not allow."""

    def __init__(self, field_name: str, value: Any, why: str) -> None:
        super().__init__(f"{field_name} {value!r:.200} is not allowed: {why}")
        self.field, self.value, self.why = field_name, value, why


@dataclass(frozen=True)
class JobPolicy:
    """The handlers and stores jobs may name.

    Attributes:
        modules: modules every attribute of which may be a handler.
        handlers: exact ``package.module:callable`` handlers.
        directories: real paths of the directories SQLite stores may be in.
        urls: prefixes other store URLs must start with.
        own_store: the node's own store (a real path for SQLite, else the
            URL): never a ``target``, whatever the rest
            allows, since a replication into it would overwrite the node's jobs.
    """

    modules: frozenset[str] = frozenset()
    handlers: frozenset[str] = frozenset()
    directories: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    own_store: str | None = None

    # ---------------------------------------------------------- building
    @classmethod
    def from_config(cls, config: Config) -> "JobPolicy":
        """The policy of a node's config (``[replicator] handlers, stores``, ``[node] store``).

        Relative directories are taken from the working directory (the
        node's, where relative store URLs point too).
        """
        return cls.from_entries(config.replicator.handlers, config.replicator.stores, config.node.store)

    @classmethod
    def from_entries(
        cls, handlers: str | Sequence[str] = "", stores: str | Sequence[str] = "", node_store: str | None = None
    ) -> "JobPolicy":
        """The policy of the two config values (comma-separated, or lists of entries).

        Args:
            handlers: ``package.module`` and ``package.module:callable`` entries.
            stores: directories and URL prefixes (``scheme://...``); none
                means the node's data directory.
            node_store: the node's store URL: with no ``stores``, the
                directory holding its SQLite file (or, not SQLite, the URL
                itself) is allowed; None allows no store then.
        """
        handler_entries = split_list(handlers) if isinstance(handlers, str) else list(handlers)
        store_entries = split_list(stores) if isinstance(stores, str) else list(stores)
        if not store_entries and node_store is not None:
            store_entries = [entry for entry in [data_directory(node_store)] if entry is not None]
        return cls(
            modules=frozenset(e for e in handler_entries if ":" not in e),
            handlers=frozenset(e for e in handler_entries if ":" in e),
            directories=tuple(os.path.realpath(e) for e in store_entries if "://" not in e),
            urls=tuple(e for e in store_entries if "://" in e),
            own_store=_store_identity(node_store) if node_store is not None else None,
        )

    def to_dict(self) -> dict:
        """JSON-compatible form (the HTTP process gets its policy so)."""
        return {
            "modules": sorted(self.modules),
            "handlers": sorted(self.handlers),
            "directories": list(self.directories),
            "urls": list(self.urls),
            "own_store": self.own_store,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobPolicy":
        """The inverse of :meth:`to_dict` (the directories are already real paths)."""
        return cls(
            modules=frozenset(data.get("modules") or ()),
            handlers=frozenset(data.get("handlers") or ()),
            directories=tuple(data.get("directories") or ()),
            urls=tuple(data.get("urls") or ()),
            own_store=data.get("own_store"),
        )

    # ---------------------------------------------------------- checking
    def check(self, spec: Mapping[str, Any]) -> None:
        """Refuse a job spec or replication document naming what is not allowed.

        Only the fields this policy is about are read: ``handler``,
        ``source`` and ``target`` (a store as a URL string or an object with
        a ``"url"``). A field that is absent, empty or not a string is left
        to the spec's own validation.

        Raises:
            Forbidden: naming the first field not allowed and why.
        """
        self.check_handler(spec.get("handler"))
        for name in STORE_FIELDS:
            value = spec.get(name)
            self.check_store(name, value.get("url") if isinstance(value, Mapping) else value)

    def check_handler(self, handler: Any) -> None:
        """Raises Forbidden unless ``handler`` is allowed (or none is given)."""
        if not isinstance(handler, str) or not handler or handler == REPLICATE_HANDLER:
            return
        if handler in self.handlers or handler.partition(":")[0] in self.modules:
            return
        raise Forbidden("handler", handler, "not in the node's [replicator] handlers")

    def check_store(self, name: str, url: Any) -> None:
        """Raises Forbidden unless the store ``url`` (field ``name``) is allowed (or none is given)."""
        if not isinstance(url, str) or not url:
            return
        if name == "target" and self.own_store is not None and _store_identity(url) == self.own_store:
            raise Forbidden(name, url, "it is the node's own store (a replication would overwrite its jobs)")
        if url.partition(":")[0].lower() == "sqlite":
            try:
                path = parse_store_url(url).path
            except InvalidStoreURL as exc:
                raise Forbidden(name, url, f"not a valid store URL ({exc})") from None
            assert path is not None  # a sqlite: URL always names its file
            real = os.path.realpath(path)
            if not any(_inside(real, directory) for directory in self.directories):
                raise Forbidden(name, url, f"the file {real} is outside the node's [replicator] stores")
            return
        if not any(_under_prefix(url, prefix) for prefix in self.urls):
            raise Forbidden(name, url, "not a store under the node's [replicator] stores")


def data_directory(store: str) -> str | None:
    """The node's data directory: the directory of its SQLite store file, or
    (another backend) the store URL itself as an entry ending in ``?`` (that
    cluster, with any parameters); None for a URL that does not parse."""
    try:
        parsed = parse_store_url(store)
    except InvalidStoreURL:  # the node cannot open it either
        return None
    path = _sqlite_file(parsed)
    return os.path.dirname(path) if path is not None else store.partition("?")[0] + "?"


def _store_identity(url: str) -> str | None:
    """What makes two store URLs the same store: the real path of a SQLite
    file (its parameters are only settings), else the URL itself (a
    parameter such as a prefix may name another keyspace); None: it does
    not parse."""
    try:
        parsed = parse_store_url(url)
    except InvalidStoreURL:
        return None
    path = _sqlite_file(parsed)
    return os.path.realpath(path) if path is not None else url.rstrip("?")


def _sqlite_file(parsed: StoreURL) -> str | None:
    """The file a ``sqlite:`` URL names (the parser always sets it); None for another scheme."""
    return parsed.path if parsed.scheme == "sqlite" else None


def _inside(path: str, directory: str) -> bool:
    """``path`` lies strictly below ``directory`` (both real, absolute paths)."""
    return path != directory and os.path.commonpath([path, directory]) == directory


_SEGMENT_SEPARATORS = re.compile(r"[/\\?#&=]")


def _under_prefix(url: str, prefix: str) -> bool:
    """``url`` is ``prefix``, or goes on after it at a boundary with no ``..``
    segment; a prefix ending in ``?`` also matches the URL without it."""
    if prefix.endswith("?") and url == prefix[:-1]:
        return True
    if not url.startswith(prefix):
        return False
    rest = url[len(prefix) :]
    if not rest:
        return True
    if not (prefix[-1] in "/?" or rest[0] in "/?"):
        return False  # "fdb://a" is not a prefix of "fdb://ab"
    return ".." not in _SEGMENT_SEPARATORS.split(unquote(rest))


__all__ = ["Forbidden", "JobPolicy", "STORE_FIELDS", "data_directory"]
