"""The scheduler's vocabulary: its errors, a job's spec, state and history
events, the table's ``Job`` rows and the tunable ``Settings`` (plain data,
no actors, no I/O; :mod:`actors.scheduler.core` decides with them).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

from actors.settings.config import ConfigError, parse_value
from actors.errors import ActorsError

DEFAULT_HEALTH_THRESHOLD = 2 * 60  # seconds
DEFAULT_MAX_JOBS = 500
DEFAULT_MAX_CHURN = 20
DEFAULT_MAX_HISTORY = 20
DEFAULT_INTERVAL = 60000  # milliseconds

#: The exit reason of a job that returned because its node's lease fence
#: expired (:mod:`actors.scheduler.fence`): a stop, not a crash.
LEASE_EXPIRED = "lease_expired"


# ------------------------------------------------------------------ errors


class SchedulerError(ActorsError):
    """Root of the scheduler's errors (picklable: they travel in replies)."""


class InvalidSetting(SchedulerError):
    """A scheduler setting was given a value out of its range."""

    def __init__(self, key: str, value: Any, why: str) -> None:
        super().__init__(f"{key} = {value!r}: {why}")
        self.key, self.value = key, value


class InvalidJobSpec(SchedulerError):
    """A job spec is malformed."""

    def __init__(self, field_name: str, value: Any, why: str) -> None:
        super().__init__(f"job spec {field_name} = {value!r:.80}: {why}")
        self.field, self.value = field_name, value


class InvalidRequest(SchedulerError):
    """A request's argument (other than a job spec or a setting) is of the wrong type or out of range."""

    def __init__(self, name: str, value: Any, why: str) -> None:
        super().__init__(f"{name} = {value!r:.80}: {why}")
        self.name, self.value = name, value


class JobNotFound(SchedulerError):
    """No job with that id is in the scheduler's table."""

    def __init__(self, job_id: Any) -> None:
        super().__init__(f"no job {job_id!r}")
        self.job_id = job_id


# ------------------------------------------------------------------ data


class EventType(str, enum.Enum):
    """What happened to a job (one history entry)."""

    ADDED = "added"
    STARTED = "started"
    STOPPED = "stopped"
    CRASHED = "crashed"


class RunState(str, enum.Enum):
    """A job's state as job_summary reports it."""

    PENDING = "pending"
    CRASHING = "crashing"
    RUNNING = "running"


@dataclass(frozen=True)
class Event:
    """One history entry: ``type`` at wall-clock ``when``; ``reason`` for crashes."""

    type: EventType
    when: float
    reason: Any = None


_SPEC_FIELDS = (
    "id",
    "handler",
    "source",
    "target",
    "continuous",
    "options",
    "db_name",
    "doc_id",
    "user",
    "start_time",
    "isolation",
)
#: How a job runs: a thread of a job host (cheap, the default) or a process of its own.
ISOLATIONS = ("thread", "process")


@dataclass(frozen=True)
class JobSpec:
    """What a job runs: a handler (``package.module:callable``) or, with
    ``source`` and ``target`` and no handler, the built-in ``replicate`` kind.

    A job with a ``db_name`` is permanent (a replicator document): a crash
    is recorded and the job retried with backoff. Without one it is
    transient (``POST /_replicate``): a crash removes it.

    ``isolation`` is ``"thread"`` (the default: the job runs in a thread of
    one of the node's job hosts, :mod:`actors.scheduler.host`) or
    ``"process"`` (an actor process of its own: for CPU-bound handlers,
    native code that may block without a timeout, or code that must be
    killable alone).
    """

    id: Any
    handler: str | None = None
    source: str | None = None
    target: str | None = None
    continuous: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    db_name: str | None = None
    doc_id: str | None = None
    user: str | None = None
    start_time: float | None = None
    isolation: str = "thread"

    @property
    def kind(self) -> str:
        """``"handler"`` or ``"replicate"``."""
        return "handler" if self.handler else "replicate"

    @property
    def transient(self) -> bool:
        """True for a job with no document behind it."""
        return self.db_name is None

    def to_dict(self) -> dict:
        """The spec as JSON-compatible data."""
        d = {k: getattr(self, k) for k in _SPEC_FIELDS}
        d["options"] = dict(self.options)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], now: float | None = None) -> "JobSpec":
        """Validate a spec given as a dict (JSON-compatible values).

        Raises:
            InvalidJobSpec: unknown field, missing id, no handler and no
                source/target, or a field of the wrong type.
        """
        if isinstance(data, JobSpec):
            return data
        if not isinstance(data, Mapping):
            raise InvalidJobSpec("spec", data, "must be a dict")
        unknown = sorted(set(data) - set(_SPEC_FIELDS))
        if unknown:
            raise InvalidJobSpec(unknown[0], data[unknown[0]], "unknown field")
        job_id = data.get("id")
        if not isinstance(job_id, str) or not job_id:
            raise InvalidJobSpec("id", job_id, "must be a non-empty str")
        for name in ("handler", "source", "target", "db_name", "doc_id", "user"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise InvalidJobSpec(name, value, "must be a str")
        handler = data.get("handler")
        if handler is not None:
            module, sep, attr = handler.partition(":")
            if not (module and sep and attr):
                raise InvalidJobSpec("handler", handler, "expected 'package.module:callable'")
        elif not (data.get("source") and data.get("target")):
            raise InvalidJobSpec("handler", None, "give a handler, or a source and a target")
        continuous = data.get("continuous", False)
        if not isinstance(continuous, bool):
            raise InvalidJobSpec("continuous", continuous, "must be a bool")
        options = data.get("options")
        options = {} if options is None else options
        if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
            raise InvalidJobSpec("options", options, "must be a dict with str keys")
        start_time = data.get("start_time")
        if start_time is None:
            start_time = now
        elif isinstance(start_time, bool) or not isinstance(start_time, (int, float)):
            raise InvalidJobSpec("start_time", start_time, "must be a number (epoch seconds)")
        elif not is_showable_time(start_time):
            raise InvalidJobSpec(
                "start_time", start_time, "must be a time the clock can show (finite epoch seconds, years 1 to 9999)"
            )
        isolation = data.get("isolation")
        isolation = "thread" if isolation is None else isolation
        if isolation not in ISOLATIONS:
            raise InvalidJobSpec("isolation", isolation, "must be 'thread' or 'process'")
        return cls(
            job_id,
            handler,
            data.get("source"),
            data.get("target"),
            continuous,
            dict(options),
            data.get("db_name"),
            data.get("doc_id"),
            data.get("user"),
            start_time,
            isolation,
        )


@dataclass(eq=False)
class JobRow:
    """One row of the job table (the seed's ``#job{}``)."""

    id: Any
    spec: JobSpec
    history: list
    pid: Any = None
    monitor: Any = None
    stats: dict = field(default_factory=dict)
    checkpoint: Any = None

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class Settings:
    """The scheduler's tunables (the seed's ``#state{}``); ``interval`` in ms,
    ``health_threshold`` in seconds."""

    max_jobs: int = DEFAULT_MAX_JOBS
    max_churn: int = DEFAULT_MAX_CHURN
    max_history: int = DEFAULT_MAX_HISTORY
    interval: int = DEFAULT_INTERVAL
    health_threshold: int = DEFAULT_HEALTH_THRESHOLD

    def with_setting(self, key: str, value: Any) -> "Settings":
        """A copy with one setting changed, validated as the config file's
        ``[replicator]`` values are (:func:`actors.settings.config.parse_value`).

        Raises:
            InvalidSetting: unknown key, not an integer (an int or its
                decimal text), or out of range (max_jobs >= 0, the others
                >= 1; interval at most ``actors.settings.schema.MAX_MSEC`` ms, a timer's
                limit; none longer than 20 digits).
        """
        if not isinstance(key, str) or key not in {f.name for f in dataclasses.fields(self)}:
            raise InvalidSetting(key, value, "unknown setting")
        try:
            value = parse_value("replicator", key, value)
        except ConfigError as exc:
            raise InvalidSetting(key, value, exc.why) from None
        return dataclasses.replace(self, **{key: value})


def is_showable_time(when: float) -> bool:
    """True for wall-clock seconds :func:`iso8601` can show (finite, within the platform's range)."""
    try:
        iso8601(when)
    except (OverflowError, OSError, ValueError):
        return False
    return True


def iso8601(when: float | None) -> str | None:
    """Wall-clock seconds as ``YYYY-MM-DDTHH:MM:SSZ`` (None stays None)."""
    if when is None:
        return None
    return datetime.datetime.fromtimestamp(when, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
