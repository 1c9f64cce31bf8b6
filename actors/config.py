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
  ``type_check_max_jitter_msec`` (5000).
"""
from __future__ import annotations

import configparser
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


class ConfigError(ValueError):
    """A configuration value is malformed or out of range."""

    def __init__(self, section: str, key: str, value: Any, why: str) -> None:
        super().__init__(f"[{section}] {key} = {value!r}: {why}")
        self.section, self.key, self.value = section, key, value


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
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(section, key, raw, "must be an integer") from None
    low = 1 if key in ("max_jobs", "interval", "port", "max_history") else 0
    if value < low:
        raise ConfigError(section, key, raw, f"must be >= {low}")
    if key in ("port", "http_port") and value > 65535:
        raise ConfigError(section, key, raw, "must be a TCP port (<= 65535)")
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


def node_name(config: Config) -> str:
    """The node's name in job and doc views: ``otpjobs-<admin port>@<host>``
    (CouchDB shows ``node1@127.0.0.1``); unique per host and port."""
    import socket

    return f"otpjobs-{config.get('node', 'port')}@{socket.gethostname()}"
