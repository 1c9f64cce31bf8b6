"""The node's settings schema: every known key once, with its kind, unit,
bounds, default and whether it changes at run time.

Principle: one table says what a setting is; everything else is derived
from it. :mod:`actors.settings.config` validates file, ``_config`` and code
values with :func:`parse`, its ``DEFAULTS`` and ``RUNTIME_KEYS`` are read
off the table, and code reading a section gets it as a typed, frozen
record with the units converted once (:func:`typed`, and ``Config.node``,
``.replicator``, ``.couch_jobs``, ``.worker``: milliseconds become
seconds, ``infinity`` becomes None, lists become tuples).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

__all__ = [
    "Setting",
    "SCHEMA",
    "INFINITY",
    "MAX_MSEC",
    "LOG_LEVELS",
    "lookup",
    "parse",
    "defaults",
    "runtime_keys",
    "seconds",
    "split_list",
    "NodeSettings",
    "ReplicatorSettings",
    "CouchJobsSettings",
    "WorkerSettings",
    "RECORDS",
    "typed",
    "couch_jobs_settings",
    "SettingsChanged",
]

INFINITY = "infinity"
#: Largest millisecond value (Erlang's erlang:send_after limit, 2^32 - 1).
MAX_MSEC = 4294967295
LOG_LEVELS = ("debug", "info", "warning", "error")
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class Setting:
    """One key of one section.

    ``kind``: ``"int"`` (a whole number; ``unit`` ``"ms"`` for a timer's
    milliseconds, ``"s"`` for seconds, ``"port"`` for a TCP port), ``"str"``,
    or ``"list"`` (comma-separated entries, each checked by ``check``).
    ``low`` and ``high``: the int's bounds (the seed's scheduler accepts
    max_jobs 0 but not a zero churn, interval, history or threshold; a zero
    period would make a queue check spin; a timer's milliseconds stop at
    :data:`MAX_MSEC`, a port at 65535; None: no upper bound).
    ``may_be_infinity``: ``infinity`` is a value (no timeout).
    ``runtime``: it changes while the node runs (``_config``), else only in
    the file. ``check``: extra rule for a str, or for each entry of a list,
    returning why it is wrong or None.
    """

    section: str
    key: str
    kind: str
    default: Any
    unit: str = ""
    low: int = 0
    high: int | None = None
    may_be_empty: bool = False
    may_be_infinity: bool = False
    runtime: bool = False
    check: Callable[[str], str | None] | None = None


#: The largest value of each unit that has one.
_UNIT_HIGH = {"ms": MAX_MSEC, "port": 65535}


def _int(section: str, key: str, default: Any, unit: str = "", low: int = 0, **more: Any) -> Setting:
    more.setdefault("high", _UNIT_HIGH.get(unit))
    return Setting(section, key, "int", default, unit=unit, low=low, **more)


def _log_level(value: str) -> str | None:
    return None if value.lower() in LOG_LEVELS else f"must be one of {', '.join(LOG_LEVELS)}"


def _app(value: str) -> str | None:
    module, sep, attr = value.partition(":")
    ok = bool(sep) and bool(module) and bool(attr) and dotted(module) and dotted(attr)
    return None if ok else "must be 'package.module:callable'"


def dotted(text: str) -> bool:
    """``a.b.c`` made of Python identifiers."""
    return all(part.isidentifier() for part in text.split("."))


def _handler_entry(entry: str) -> str | None:
    module, sep, attr = entry.partition(":")
    if not dotted(module) or sep and not dotted(attr):
        return f"entry {entry!r} is not 'package.module' or 'package.module:callable'"
    return None


_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def _store_entry(entry: str) -> str | None:
    """A URL prefix (``scheme://...``, not ``sqlite:``, whose files are given
    by their directory) or a directory."""
    if "://" in entry:
        scheme = entry.partition("://")[0]
        if not _URL_SCHEME.fullmatch(scheme):
            return f"entry {entry!r} is not a URL prefix (scheme://...) or a directory"
        if scheme.lower() == "sqlite":
            return f"entry {entry!r}: give the directory holding SQLite stores, not a sqlite: URL"
    elif "\0" in entry:
        return f"entry {entry!r} is not a directory"
    return None


def split_list(raw: str) -> list[str]:
    """The entries of a comma-separated value (stripped; empty ones dropped)."""
    return [entry.strip() for entry in raw.split(",") if entry.strip()]


def _cj(key: str, default: Any, low: int = 0, **more: Any) -> Setting:
    return _int("couch_jobs", key, default, unit="ms", low=low, runtime=True, **more)


#: Every known setting. ``[workers]`` and ``[periodic]`` are free-form
#: sections (job type -> handler, job type -> cron), not listed here.
SCHEMA: tuple[Setting, ...] = (
    _int("node", "port", 1900, unit="port", low=1),
    Setting("node", "store", "str", "sqlite:///otpjobs.db"),
    _int("node", "http_port", 5984, unit="port"),
    Setting("node", "bind_address", "str", "127.0.0.1"),
    Setting("node", "log_level", "str", "info", check=_log_level),
    Setting("node", "app", "str", "", may_be_empty=True, check=_app),
    _int("replicator", "max_jobs", 500, runtime=True),
    _int("replicator", "max_churn", 20, low=1, runtime=True),
    _int("replicator", "interval", 60000, unit="ms", low=1, runtime=True),
    _int("replicator", "max_history", 20, low=1, runtime=True),
    _int("replicator", "health_threshold", 120, unit="s", low=1, runtime=True),
    _int("replicator", "doc_owner_timeout", 30, unit="s"),
    Setting("replicator", "handlers", "list", "", check=_handler_entry),
    Setting("replicator", "stores", "list", "", check=_store_entry),
    _cj("activity_monitor_max_jitter_msec", 10000),
    _cj("type_monitor_holdoff_msec", 50),
    _cj("type_monitor_timeout_msec", INFINITY, low=1, may_be_infinity=True),
    _cj("type_check_period_msec", 15000, low=1),
    _cj("type_check_max_jitter_msec", 5000),
    _int("worker", "concurrency", 4, low=1, high=1024),
    _int("worker", "async_concurrency", 100, low=1, high=10000),
    _int("worker", "max_attempts", 3, low=1, high=1000),
    _int("worker", "grace", 30, unit="s"),
    _int("worker", "type_timeout", 30, unit="s", low=1),
    _int("worker", "job_timeout", 0, unit="s"),
    _int("worker", "keep_finished", 86400, unit="s"),
    _int("worker", "keep_failed", 7 * 86400, unit="s"),
)
_BY_KEY = {(s.section, s.key): s for s in SCHEMA}


def known(section: str, key: str) -> Setting:
    """The setting ``[section] key`` of the schema (KeyError if there is none)."""
    return _BY_KEY[(section, key)]


def lookup(section: Any, key: Any) -> Setting | None:
    """The setting ``[section] key``; None for anything unknown (even unhashable)."""
    if not isinstance(section, str) or not isinstance(key, str):
        return None
    return _BY_KEY.get((section, key))


def defaults() -> dict[str, dict[str, Any]]:
    """``{section: {key: default}}`` (a fresh copy)."""
    out: dict[str, dict[str, Any]] = {}
    for s in SCHEMA:
        out.setdefault(s.section, {})[s.key] = s.default
    return out


def runtime_keys() -> dict[str, tuple[str, ...]]:
    """``{section: keys that change while the node runs}``."""
    out: dict[str, tuple[str, ...]] = {}
    for s in SCHEMA:
        if s.runtime:
            out[s.section] = out.get(s.section, ()) + (s.key,)
    return out


def parse(setting: Setting, raw: Any) -> Any:
    """Validate and convert ``raw`` (str from a file or HTTP, int from code).

    Returns the value (a list as its entries joined by ", "), or raises
    ValueError with why it is wrong, naming the first bad entry of a list
    (the caller names section, key and value).
    """
    if setting.kind == "list":
        if not isinstance(raw, str):
            raise ValueError("must be a string (comma-separated entries)")
        entries = split_list(raw)
        for entry in entries:
            why = setting.check(entry) if setting.check is not None else None
            if why is not None:
                raise ValueError(why)
        return ", ".join(entries)
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise ValueError("must be a string" if setting.kind == "str" else "must be an integer")
    if setting.kind == "str":
        return _parse_str(setting, str(raw).strip())
    text = str(raw).strip()
    if setting.may_be_infinity and text == INFINITY:
        return INFINITY
    if not _INTEGER.fullmatch(text) or len(text) > 20:
        raise ValueError("must be an integer")
    value = int(text)
    if value < setting.low:
        raise ValueError(f"must be >= {setting.low}")
    if setting.high is not None and value > setting.high:
        raise ValueError(
            "must be a TCP port (<= 65535)"
            if setting.unit == "port"
            else f"must be <= {setting.high}{' ms' if setting.unit == 'ms' else ''}"
        )
    return value


def _parse_str(setting: Setting, value: str) -> str:
    if not value and not setting.may_be_empty:
        raise ValueError("must not be empty")
    if value and setting.check is not None:
        why = setting.check(value)
        if why is not None:
            raise ValueError(why)
    return value.lower() if setting.check is _log_level else value


# ----------------------------------------------------- typed sections


def seconds(section: str, key: str, value: Any) -> float | None:
    """A value of ``[section] key`` in seconds: ``ms`` divided once here,
    ``infinity`` as None."""
    setting = _BY_KEY[(section, key)]
    if value == INFINITY:
        return None
    return value / 1000.0 if setting.unit == "ms" else float(value)


@dataclass(frozen=True)
class NodeSettings:
    """``[node]``: where a node listens, its store, its log level and its app."""

    port: int
    store: str
    http_port: int
    bind_address: str
    log_level: str  # debug, info, warning or error
    app: str  # "" for none


@dataclass(frozen=True)
class ReplicatorSettings:
    """``[replicator]``, times in seconds (the scheduler's own settings calls
    keep CouchDB's milliseconds for ``interval``), lists as tuples."""

    max_jobs: int
    max_churn: int
    interval: float
    max_history: int
    health_threshold: float
    doc_owner_timeout: float
    handlers: tuple[str, ...]
    stores: tuple[str, ...]


@dataclass(frozen=True)
class CouchJobsSettings:
    """``[couch_jobs]`` as the queue's actors use it, in seconds."""

    activity_monitor_max_jitter: float
    type_monitor_holdoff: float
    type_monitor_timeout: float | None  # None: no timeout
    type_check_period: float
    type_check_max_jitter: float


@dataclass(frozen=True)
class WorkerSettings:
    """``[worker]``: a worker host's defaults, times in seconds."""

    concurrency: int
    async_concurrency: int  #: async handlers' runs a worker awaits at once
    max_attempts: int
    grace: float
    type_timeout: float
    job_timeout: float  #: seconds a run may take; 0: no limit
    keep_finished: float  #: seconds a succeeded job is kept once finished; 0: for ever
    keep_failed: float  #: seconds a job that failed for good is kept; 0: for ever


#: The record of each schema section.
RECORDS = {
    "node": NodeSettings,
    "replicator": ReplicatorSettings,
    "couch_jobs": CouchJobsSettings,
    "worker": WorkerSettings,
}


def typed(section: str, values: dict) -> Any:
    """The frozen record of a section's values (as parsed): times in seconds
    (``infinity`` as None), lists as tuples of entries; a ``[couch_jobs]``
    key loses its ``_msec``."""
    fields = {}
    for setting in (s for s in SCHEMA if s.section == section):
        value = values[setting.key]
        if setting.kind == "list":
            value = tuple(split_list(value))
        elif setting.unit in ("ms", "s"):
            value = seconds(section, setting.key, value)
        fields[setting.key.removesuffix("_msec")] = value
    return RECORDS[section](**fields)


def couch_jobs_settings(values: dict) -> CouchJobsSettings:
    """The typed record of a ``[couch_jobs]`` section's values (as parsed)."""
    return typed("couch_jobs", values)


@dataclass(frozen=True)
class SettingsChanged:
    """Base of the keeper's change calls: run with ``values`` from now on.

    ``generation`` grows with every change the keeper makes (of any
    section), and a new keeper's are larger than an old one's; an actor
    ignores a generation older than the one it has (:meth:`newer_than`).
    The answer is ``"ok"`` once the values are applied.
    """

    values: dict
    generation: int

    def newer_than(self, generation: int) -> bool:
        """True if this change is to be applied over ``generation``."""
        return self.generation > generation
