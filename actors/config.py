"""Node configuration: an INI file with CouchDB's sections and the seeds' defaults.

Sections and keys (all optional; values are validated on load, a bad one is
a :class:`ConfigError` naming section, key and value):

* ``[node]`` ``port`` (admin port, 1900), ``store`` (store URL, the embedded
  SQLite file ``./otpjobs.db``), ``http_port`` (5984; 0 lets the system
  pick a free port, see ``GetHttpInfo``), ``bind_address``
  (127.0.0.1), ``log_level`` (info).
* ``[replicator]`` ``max_jobs`` (500), ``max_churn`` (20), ``interval``
  (60000 ms), ``max_history`` (20), ``health_threshold`` (120 s).
* ``[couch_jobs]`` ``activity_monitor_max_jitter_msec`` (10000),
  ``type_monitor_holdoff_msec`` (50), ``type_monitor_timeout_msec``
  (infinity), ``type_check_period_msec`` (15000),
  ``type_check_max_jitter_msec`` (5000). Each is a whole number of
  milliseconds up to :data:`MAX_MSEC` (Erlang's timer limit);
  ``type_check_period_msec`` and ``type_monitor_timeout_msec`` are at
  least 1 (0 would re-check without pause). ``PUT
  /_node/_local/_config/couch_jobs/{key}`` changes them at run time (see
  :class:`actors.jobs_sup.JobsConfig`).

The run-time messages of the ``[couch_jobs]`` settings live here, so that
every queue actor can import them: :class:`GetCouchJobs` and
:class:`SetCouchJobs` (calls to the keeper), :class:`CouchJobsChanged` (the
keeper's call to the jobs server, which passes it on to each per-type actor)
and :class:`GetCouchJobsInUse`.
"""
from __future__ import annotations

import configparser
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INFINITY = "infinity"

DEFAULTS: dict[str, dict[str, Any]] = {
    "node": {"port": 1900, "store": "sqlite:///otpjobs.db", "http_port": 5984,
             "bind_address": "127.0.0.1", "log_level": "info"},
    "replicator": {"max_jobs": 500, "max_churn": 20, "interval": 60000, "max_history": 20,
                   "health_threshold": 120, "doc_owner_timeout": 30},
    "couch_jobs": {"activity_monitor_max_jitter_msec": 10000, "type_monitor_holdoff_msec": 50,
                   "type_monitor_timeout_msec": INFINITY, "type_check_period_msec": 15000,
                   "type_check_max_jitter_msec": 5000},
}

_STRINGS = {("node", "store"), ("node", "bind_address"), ("node", "log_level")}
_MAY_BE_INFINITY = {("couch_jobs", "type_monitor_timeout_msec")}
_LOG_LEVELS = ("debug", "info", "warning", "error")
#: Largest millisecond value (Erlang's erlang:send_after limit, 2^32 - 1).
MAX_MSEC = 4294967295
#: [couch_jobs] keys that must be >= 1 (0 would spin).
_AT_LEAST_ONE = {"max_jobs", "interval", "port", "max_history", "type_check_period_msec",
                 "type_monitor_timeout_msec"}
_INTEGER = re.compile(r"[+-]?[0-9]+")


class ConfigError(ValueError):
    """A configuration value is malformed or out of range."""

    def __init__(self, section: str, key: str, value: Any, why: str) -> None:
        super().__init__(f"[{section}] {key} = {value!r}: {why}")
        self.section, self.key, self.value, self.why = section, key, value, why

    def __reduce__(self) -> tuple:  # travels between processes inside a call's Failure
        return (type(self), (self.section, self.key, self.value, self.why))


def parse_value(section: str, key: str, raw: Any) -> Any:
    """Validate and convert one value of a known key.

    Raises:
        ConfigError: unknown key, or a value of the wrong type or range.
    """
    if section not in DEFAULTS or key not in DEFAULTS[section]:
        raise ConfigError(section, key, raw, "unknown setting")
    if (section, key) in _STRINGS:
        value = str(raw).strip()
        if not value:
            raise ConfigError(section, key, raw, "must not be empty")
        if key == "log_level" and value.lower() not in _LOG_LEVELS:
            raise ConfigError(section, key, raw, f"must be one of {', '.join(_LOG_LEVELS)}")
        return value.lower() if key == "log_level" else value
    if (section, key) in _MAY_BE_INFINITY and str(raw).strip() == INFINITY:
        return INFINITY
    text = str(raw).strip()
    if not _INTEGER.fullmatch(text) or len(text) > 20:
        raise ConfigError(section, key, raw, "must be an integer")
    value = int(text)
    low = 1 if key in _AT_LEAST_ONE else 0
    if value < low:
        raise ConfigError(section, key, raw, f"must be >= {low}")
    if key in ("port", "http_port") and value > 65535:
        raise ConfigError(section, key, raw, "must be a TCP port (<= 65535)")
    if key.endswith("_msec") and value > MAX_MSEC:
        raise ConfigError(section, key, raw, f"must be <= {MAX_MSEC} ms")
    return value


@dataclass
class Config:
    """Settings by section; unset keys read as the seeds' defaults."""

    values: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: dict(v) for s, v in DEFAULTS.items()})
    #: The INI file it was read from (the HTTP listener hashes its [admins] there).
    path: str | None = None

    def get(self, section: str, key: str) -> Any:
        """The value of a known key."""
        return self.values[section][key]

    def set(self, section: str, key: str, raw: Any) -> Any:
        """Validate and set a value; returns the converted value."""
        value = parse_value(section, key, raw)
        self.values[section][key] = value
        return value

    def section(self, section: str) -> dict[str, Any]:
        """A copy of one section."""
        return dict(self.values[section])


def load(path: str | Path | None = None, overrides: dict[tuple[str, str], Any] | None = None) -> Config:
    """Read an INI file (if given) over the defaults, then apply ``overrides``.

    Sections other than node, replicator and couch_jobs (admins, httpd...)
    are ignored here. Raises ConfigError for a bad value, FileNotFoundError
    for a missing file.
    """
    config = Config(path=None if path is None else str(path))
    if path is not None:
        parser = configparser.ConfigParser(interpolation=None)
        with open(path) as f:
            parser.read_file(f)
        for section in DEFAULTS:
            if parser.has_section(section):
                for key, raw in parser.items(section):
                    config.set(section, key, raw)
    for (section, key), raw in (overrides or {}).items():
        if raw is not None:
            config.set(section, key, raw)
    return config


# ------------------------------------------------- run-time [couch_jobs]


@dataclass(frozen=True)
class CouchJobsChanged:
    """Call to a queue actor: run with these ``[couch_jobs]`` values from now on.

    ``generation`` grows with every change (:class:`actors.jobs_sup.JobsConfig`
    counts them); an actor ignores a generation older than the one it has.
    The answer is ``"ok"`` once the actor (and whatever it passes the values
    on to) applied them.
    """

    values: dict
    generation: int


@dataclass(frozen=True)
class GetCouchJobsInUse:
    """Call to a queue actor: the ``[couch_jobs]`` values it runs with (its keys only)."""


@dataclass(frozen=True)
class GetCouchJobs:
    """Call to the settings keeper: ``(generation, values)`` of ``[couch_jobs]``.

    A ``subscriber`` address is also sent every later change, as a
    :class:`CouchJobsChanged` call, until it exits.
    """

    subscriber: Any = None


@dataclass(frozen=True)
class SetCouchJobs:
    """Call to the settings keeper: validate and set one ``[couch_jobs]`` key.

    Answers the old value once the subscribers applied the new one, or
    ``Failure(ConfigError)`` (nothing changed) for an unknown key or a bad value.
    """

    key: str
    value: Any


def node_name(config: Config) -> str:
    """The node's name in job and doc views: ``otpjobs-<admin port>@<host>``
    (CouchDB shows ``node1@127.0.0.1``); unique per host and port."""
    import socket

    return f"otpjobs-{config.get('node', 'port')}@{socket.gethostname()}"
