"""Node configuration: an INI file with CouchDB's sections and the seeds' defaults.

Sections and keys (all optional; values are validated on load, a bad one is
a :class:`ConfigError` naming section, key and value). Each key's kind,
unit, bounds, default and whether it changes at run time are one entry of
:data:`actors.settings.schema.SCHEMA`, the source of what follows:

* ``[node]`` ``port`` (admin port, 1900), ``store`` (store URL, the embedded
  SQLite file ``./otpjobs.db``), ``http_port`` (5984; 0 lets the system
  pick a free port, see ``GetHttpInfo``), ``bind_address``
  (127.0.0.1), ``log_level`` (info).
* ``[replicator]`` ``max_jobs`` (500, at least 0), ``max_churn`` (20),
  ``interval`` (60000 ms, at most :data:`MAX_MSEC`), ``max_history`` (20),
  ``health_threshold`` (120 s), the last four at least 1 as the seed's
  scheduler checks them; ``doc_owner_timeout`` (30 s); ``handlers`` and
  ``stores`` (comma-separated lists, empty by default, read at start only:
  what a job may run and which stores it may touch, see
  :mod:`actors.settings.policy`). A ``handlers`` entry is ``package.module``
  (every callable of that module) or ``package.module:callable``; a
  ``stores`` entry with ``://`` is a URL prefix (not ``sqlite:``), any
  other a directory (SQLite files inside it); empty ``stores`` means the
  directory of the node's SQLite store.
* ``[couch_jobs]`` ``activity_monitor_max_jitter_msec`` (10000),
  ``type_monitor_holdoff_msec`` (50), ``type_monitor_timeout_msec``
  (infinity), ``type_check_period_msec`` (15000),
  ``type_check_max_jitter_msec`` (5000). Each is a whole number of
  milliseconds up to :data:`MAX_MSEC` (Erlang's timer limit);
  ``type_check_period_msec`` and ``type_monitor_timeout_msec`` are at
  least 1 (0 would re-check without pause).

The keys of :data:`RUNTIME_KEYS` also change while the node runs (``PUT
/_node/_local/_config/{section}/{key}``), through the node's settings
keeper (:class:`actors.settings.keeper.ConfigServer`), which writes a change
into the file with :func:`write_value`. The keeper's messages live here so
that every actor reading a section can import them: :class:`GetConfig` and
:class:`SetConfig` (calls to the keeper), :class:`ReplicatorChanged` and
:class:`CouchJobsChanged` (the keeper's calls to the actors reading a
section), :class:`GetCouchJobs` (the queue's own form of ``GetConfig``) and
:class:`GetCouchJobsInUse`.
"""

from __future__ import annotations

import configparser
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.errors import ActorsError
from actors.names import CONFIG_SERVER  # noqa: F401 - re-exported
from actors.settings import schema
from actors.settings.schema import SettingsChanged

#: ``{section: {key: default}}``, read off :data:`actors.settings.schema.SCHEMA`.
DEFAULTS: dict[str, dict[str, Any]] = schema.defaults()
#: Free-form sections: ``[workers] TYPE = package.module:callable`` (the types a
#: node's worker pool serves) and ``[periodic] TYPE = cron expression``.
FREE_SECTIONS = ("workers", "periodic")
#: The keys that change while the node runs, by section (the others only in the file).
RUNTIME_KEYS: dict[str, tuple[str, ...]] = schema.runtime_keys()


class ConfigError(ActorsError, ValueError):
    """A configuration value is malformed or out of range."""

    def __init__(self, section: str, key: str, value: Any, why: str) -> None:
        super().__init__(f"[{section}] {key} = {value!r}: {why}")
        self.section, self.key, self.value, self.why = section, key, value, why


def parse_value(section: str, key: str, raw: Any) -> Any:
    """Validate and convert one value of a known key, by its entry in
    :data:`actors.settings.schema.SCHEMA`.

    Raises:
        ConfigError: unknown key, or a value of the wrong type or range.
    """
    setting = schema.lookup(section, key)
    if setting is None:
        raise ConfigError(section, key, raw, "unknown setting")
    try:
        return schema.parse(setting, raw)
    except ValueError as exc:
        raise ConfigError(section, key, raw, str(exc)) from None


def parse_runtime_value(section: str, key: str, raw: Any) -> Any:
    """:func:`parse_value` for a key that may change at run time.

    Raises:
        ConfigError: a key outside :data:`RUNTIME_KEYS` (unknown, or one the
            file alone sets), or a bad value.
    """
    if not _known(section, key) or key not in RUNTIME_KEYS.get(section, ()):
        raise ConfigError(
            section, key, raw, "can only be changed in the config file" if _known(section, key) else "unknown setting"
        )
    return parse_value(section, key, raw)


def _known(section: Any, key: Any) -> bool:
    """A section and key of the schema (anything else, even unhashable, is not)."""
    return schema.lookup(section, key) is not None


def format_value(value: Any) -> str:
    """A parsed value as the config file (and ``_config``) spell it."""
    return str(value)


@dataclass
class Config:
    """Settings by section; unset keys read as the seeds' defaults."""

    values: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: dict(v) for s, v in DEFAULTS.items()})
    #: The INI file it was read from (the HTTP listener hashes its [admins] there).
    path: str | None = None
    #: ``[workers]``: job type -> handler path; ``[periodic]``: job type -> cron.
    workers: dict[str, str] = field(default_factory=dict)
    periodic: dict[str, str] = field(default_factory=dict)

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

    @property
    def node(self) -> schema.NodeSettings:
        """``[node]`` as a typed record (see :func:`actors.settings.schema.typed`)."""
        return schema.typed("node", self.values["node"])

    @property
    def replicator(self) -> schema.ReplicatorSettings:
        """``[replicator]`` as a typed record, times in seconds."""
        return schema.typed("replicator", self.values["replicator"])

    @property
    def couch_jobs(self) -> schema.CouchJobsSettings:
        """``[couch_jobs]`` as a typed record, times in seconds."""
        return schema.typed("couch_jobs", self.values["couch_jobs"])

    @property
    def worker(self) -> schema.WorkerSettings:
        """``[worker]`` as a typed record, times in seconds."""
        return schema.typed("worker", self.values["worker"])


def load(path: str | Path | None = None, overrides: dict[tuple[str, str], Any] | None = None) -> Config:
    """Read an INI file (if given) over the defaults, then apply ``overrides``.

    Sections other than node, replicator and couch_jobs (admins, httpd...)
    are ignored here. Raises ConfigError for a bad value, FileNotFoundError
    for a missing file.
    """
    config = Config(path=None if path is None else str(path))
    if path is not None:
        parser = configparser.ConfigParser(interpolation=None)
        _read_file(parser, path)
        for section in DEFAULTS:
            if parser.has_section(section):
                for key, raw in parser.items(section):
                    config.set(section, key, raw)
        exact = configparser.ConfigParser(interpolation=None)
        exact.optionxform = str  # type: ignore[method-assign, assignment]  # configparser's hook: job types keep their case
        _read_file(exact, path)
        for section in FREE_SECTIONS:
            if exact.has_section(section):
                getattr(config, section).update((k.strip(), v.strip()) for k, v in exact.items(section))
    for (section, key), raw in (overrides or {}).items():
        if raw is not None:
            config.set(section, key, raw)
    return config


class ConfigFileError(ActorsError, ValueError):
    """The config file does not parse; the message names the file and the line."""


def _read_file(parser: configparser.ConfigParser, path: str | Path) -> None:
    """Read an INI file into ``parser``, turning configparser's errors into one line."""
    try:
        with open(path) as f:
            parser.read_file(f)
    except configparser.MissingSectionHeaderError as exc:
        raise ConfigFileError(
            f"config file {path}, line {exc.lineno}: a setting before any [section] header: {exc.line.strip()!r}"
        ) from None
    except configparser.DuplicateOptionError as exc:
        raise ConfigFileError(
            f"config file {path}, line {exc.lineno}: [{exc.section}] {exc.option} is set twice"
        ) from None
    except configparser.DuplicateSectionError as exc:
        raise ConfigFileError(f"config file {path}, line {exc.lineno}: section [{exc.section}] appears twice") from None
    except configparser.ParsingError as exc:
        lineno = exc.errors[0][0] if exc.errors else 0
        raise ConfigFileError(
            f"config file {path}, line {lineno}: not a 'key = value' setting: {_line(path, lineno)!r}"
        ) from None
    except configparser.Error as exc:
        raise ConfigFileError(f"config file {path}: {str(exc).splitlines()[0]}") from None


def _line(path: str | Path, lineno: int) -> str:
    """Line ``lineno`` (from 1) of a file, stripped ("" if there is none)."""
    with open(path) as f:
        lines = f.read().splitlines()
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


# ------------------------------------------------------ writing the file

#: configparser's section and option patterns, matched on a stripped line.
_SECTION_LINE = re.compile(r"\[(?P<name>.+)\]")
_OPTION_LINE = re.compile(r"(?P<key>.*?)\s*(?P<sep>[=:])\s*(?P<value>.*)$")


class ConfigWriteError(ActorsError):
    """The config file could not be changed (it is left as it was)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"config file {path}: {why}")
        self.path, self.why = path, why


def write_value(path: str | Path, section: str, key: str, value: str) -> None:
    """Set ``key = value`` in ``[section]`` of the INI file ``path``, changing nothing else.

    The key's line (and its continuation lines) is rewritten in place; a
    key not in the file gets a line after the section's last setting, a
    section not in the file is added at its end. Comments, blank lines,
    the order of keys and the other sections stay as they were, as
    :func:`actors.http.auth.load_admins` leaves them when it hashes passwords.
    The new text must read back (with configparser) as the new value
    before it replaces the file, atomically (same mode; through a symlink,
    its target): a crash leaves the old file or the new one.

    Raises:
        ConfigWriteError: the file cannot be read, no longer parses, or
            cannot be replaced; it is unchanged.
    """
    target = Path(path).resolve()
    try:
        text = target.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigWriteError(str(path), f"cannot read it ({exc})") from None
    new_text = _with_value(text, section, key, value)
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(new_text)
        written = parser.get(section, key)
    except configparser.Error as exc:
        raise ConfigWriteError(str(path), f"does not parse ({exc})".replace("\n", " ")) from None
    if written != value:
        raise ConfigWriteError(str(path), f"[{section}] {key} would read back as {written!r}, not {value!r}")
    try:
        replace_file(target, new_text)
    except OSError as exc:
        raise ConfigWriteError(str(path), f"cannot replace it ({exc})") from None


def _with_value(text: str, section: str, key: str, value: str) -> str:
    """``text`` with ``[section] key = value`` set (see :func:`write_value`)."""
    lines = text.splitlines(keepends=True)
    current = None  # the section the line belongs to
    option_indent = None  # indent of the last option line (deeper lines continue it)
    option_index = None  # index of that option line
    found = None  # index of the key's line in the section
    continuation: list[int] = []  # the key's continuation lines
    insert_at = None  # after the section's last setting (or its header)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        indent = len(line) - len(line.lstrip())
        if option_indent is not None and indent > option_indent:
            if current == section:
                insert_at = i + 1
                if option_index == found:
                    continuation.append(i)
            continue
        header = _SECTION_LINE.match(stripped)
        if header:
            current, option_indent = header.group("name"), None
            if current == section and insert_at is None:
                insert_at = i + 1
            continue
        option = _OPTION_LINE.match(stripped)
        if option is None:
            continue  # configparser would refuse the file; the read-back says so
        option_indent, option_index = indent, i
        if current == section:
            insert_at = i + 1
            if found is None and option.group("key").strip().lower() == key:
                found = i
    if found is not None:
        line = lines[found]
        body = line.rstrip("\r\n")
        stripped = body.strip()
        option = _OPTION_LINE.match(stripped)
        assert option is not None  # the line matched when it was found
        prefix = body[: len(body) - len(body.lstrip())] + stripped[: option.start("value")]
        if not option.group("value") and not prefix[-1].isspace():
            prefix += " "  # "key =" becomes "key = value", not "key =value"
        lines[found] = f"{prefix}{value}{line[len(body) :] or chr(10)}"
        for i in reversed(continuation):
            del lines[i]
        return "".join(lines)
    entry = f"{key} = {value}\n"
    if insert_at is None:
        body = "".join(lines)
        if body and not body.endswith("\n"):
            body += "\n"
        return f"{body}{chr(10) if body else ''}[{section}]\n{entry}"
    if not lines[insert_at - 1].endswith("\n"):
        lines[insert_at - 1] += "\n"
    lines.insert(insert_at, entry)
    return "".join(lines)


def replace_file(target: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``target``, then rename it over ``target``
    (same mode; fsynced, the rename too): a crash leaves the old file or the new one."""
    mode = target.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss
    finally:
        os.close(dir_fd)


# --------------------------------------------------- run-time messages


@dataclass(frozen=True)
class GetConfig:
    """Call to the settings keeper: ``(generation, values)`` of a section of
    :data:`RUNTIME_KEYS`.

    A ``subscriber`` is sent every later change of the section, as a
    :class:`ReplicatorChanged` or :class:`CouchJobsChanged` call, until it
    exits.
    """

    section: str
    subscriber: Any = None


@dataclass(frozen=True)
class SetConfig:
    """Call to the settings keeper: validate and set one key of :data:`RUNTIME_KEYS`.

    With ``persist`` (and a node started with a config file) the file is
    rewritten first. Answers the old value once the subscribers applied the
    new one, or ``Failure(ConfigError)`` (unknown key, bad value) or
    ``Failure(ConfigWriteError)``, and then nothing changed.
    """

    section: str
    key: str
    value: Any
    persist: bool = True


@dataclass(frozen=True)
class ReplicatorChanged(SettingsChanged):
    """Call to the scheduler: run with these ``[replicator]`` values from now
    on (``generation`` as in :class:`~actors.settings.schema.SettingsChanged`)."""


@dataclass(frozen=True)
class CouchJobsChanged(SettingsChanged):
    """Call to a queue actor: run with these ``[couch_jobs]`` values from now
    on; the answer is ``"ok"`` once the actor (and whatever it passes the
    values on to) applied them."""


@dataclass(frozen=True)
class GetCouchJobsInUse:
    """Call to a queue actor: the ``[couch_jobs]`` values it runs with (its keys only)."""


@dataclass(frozen=True)
class GetCouchJobs:
    """Call to the settings keeper: ``GetConfig("couch_jobs", subscriber)``, as the
    queue's server asks it."""

    subscriber: Any = None


#: The call a section's subscribers get on a change.
CHANGED = {"replicator": ReplicatorChanged, "couch_jobs": CouchJobsChanged}


def node_name(config: Config) -> str:
    """The node's name in job and doc views: ``otpjobs-<admin port>@<host>``
    (CouchDB shows ``node1@127.0.0.1``); unique per host and port."""
    import socket

    return f"otpjobs-{config.node.port}@{socket.gethostname()}"
