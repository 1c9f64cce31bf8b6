"""The node's settings keeper: CouchDB's config server for what changes at run time.

Principle: one actor per node holds the current values of the keys that
change while the node runs (:data:`~actors.settings.config.RUNTIME_KEYS`:
``[replicator]`` and ``[couch_jobs]``). It is the first child of the
node's root supervisor, so it starts before and outlives the actors that
read it. A reader asks it for its section when it starts, naming itself as
a subscriber, and is called with every later change:
:class:`~actors.settings.config.ReplicatorChanged` to the scheduler,
:class:`~actors.settings.config.CouchJobsChanged` to the queue's jobs server (which
passes them on to its per-type actors). So a reader restarted after a crash
or a SIGKILL runs with the latest values, not with its start-time args.

* A change (``SetConfig``, from ``PUT /_node/_local/_config/{section}/{key}``)
  is validated, then written into the node's config file when the node was
  started with one and the change asks to persist (the default; ``PUT``
  with ``X-Couch-Persist: false`` does not), then applied, logged
  (``config_changed``) and handed to the subscribers; the old value is the
  answer once they applied it. A bad value or a failed write changes
  nothing. A node started without a config file keeps changes in this
  actor only: a node restart starts again from the defaults.
* A subscriber is monitored and dropped when it exits. If the keeper
  itself dies, its supervisor starts a new one, which starts from the
  config file (with the changes written there; changes made without
  persisting die with the keeper that held them) and hands its values to
  the readers already running (:data:`READERS`, found by their registered
  names), subscribing them: they keep running, as they did while the
  keeper was away. Generations come from the system's monotonic clock, so
  a new keeper's are newer than any of an old one.
* A tree started without the keeper (tests that start the scheduler
  alone) still runs: each reader then keeps its start-time args.

Registered as :data:`CONFIG_SERVER` (the name the scheduler and the queue's
server look their settings keeper up by).
"""

from __future__ import annotations

import configparser
import functools
import logging
import time
from typing import Any, Callable

from supervision import NOREPLY, ChildSpec, Down, GenServer
from supervision.messages import Failure, WhereIs
from supervision.reports import report

from actors.settings.config import (
    CHANGED,
    CONFIG_SERVER,
    RUNTIME_KEYS,
    Config,
    ConfigError,
    ConfigWriteError,
    GetConfig,
    GetCouchJobs,
    SetConfig,
    format_value,
    load,
    parse_runtime_value,
    write_value,
)
from actors.names import JOBS_SERVER
from actors.names import SCHEDULER as SCHEDULER_NAME

log = logging.getLogger(__name__)

#: The registered names of the actors reading each section (a new keeper hands them its values).
READERS = {"replicator": (SCHEDULER_NAME,), "couch_jobs": (JOBS_SERVER,)}
#: Seconds the keeper waits for its subscribers to apply a change before answering anyway.
APPLY_TIMEOUT = 20.0


def fan_out(actor: GenServer, targets: list, msg: Any, timeout: float, done: Callable[[], None]) -> None:
    """Call every target with ``msg`` at once; ``done()`` once each answered or failed.

    A failure is logged, not raised: a target that died is restarted with
    the current settings anyway.
    """
    left = len(targets)
    if not left:
        done()
        return

    def answered(target: Any) -> Callable[[Any, Exception | None], None]:
        def callback(_value: Any, error: Exception | None) -> None:
            nonlocal left
            if error is not None:
                log.info("config_not_applied target=%s reason=%r", target, error)
            left -= 1
            if left == 0:
                done()

        return callback

    for target in targets:
        actor.call_async(target, msg, answered(target), timeout)


def config_args(config: Config) -> dict:
    """The keeper's args: the config file's path and the start-time run-time sections."""
    return {
        "path": config.path,
        "sections": {
            section: {key: config.get(section, key) for key in keys} for section, keys in RUNTIME_KEYS.items()
        },
    }


def config_children(config: Config) -> list[ChildSpec]:
    """The keeper as a node root child (the first one: see :func:`actors.node.root.root_children`)."""
    return [ChildSpec("config_server", ConfigServer, config_args(config), name=CONFIG_SERVER)]


class ConfigServer(GenServer):
    """Keeps the run-time sections, writes changes to the file, tells subscribers.

    Calls: :class:`~actors.settings.config.GetConfig` and
    :class:`~actors.settings.config.GetCouchJobs` (``(generation, values)``;
    subscribes a subscriber), :class:`~actors.settings.config.SetConfig` (the old
    value, or a Failure with ConfigError or ConfigWriteError).
    """

    def init(self, args: Any) -> None:
        self.path: str | None = args.get("path")
        self.values: dict[str, dict] = {section: dict(values) for section, values in args["sections"].items()}
        if self.path is not None:
            self._read_file()
        self.generation = time.monotonic_ns()
        self.subscribers: dict[str, dict[str, Any]] = {section: {} for section in self.values}  # ref -> addr
        for section, names in READERS.items():
            for name in names:
                self.call_async(
                    self.node, WhereIs(name), functools.partial(self._reader_found, section, name), APPLY_TIMEOUT
                )

    def _read_file(self) -> None:
        """Take the file's values (a restarted keeper keeps what was written there)."""
        try:
            config = load(self.path)
        except (OSError, ValueError, configparser.Error) as exc:  # edited into a bad file since
            report("config_file_unreadable", logging.WARNING, file=self.path, reason=exc)
            return
        for section, values in self.values.items():
            values.update({key: config.get(section, key) for key in values})

    def _reader_found(self, section: str, name: str, addr: Any, error: Exception | None) -> None:
        """A reader running before this keeper (the one before it died): subscribe it, give it our values."""
        if addr is None or addr in self.subscribers[section].values():
            return
        self._subscribe(section, addr)
        report("config_handed_over", section=section, reader=name, generation=self.generation)
        fan_out(
            self, [addr], CHANGED[section](dict(self.values[section]), self.generation), APPLY_TIMEOUT, lambda: None
        )

    def _subscribe(self, section: str, addr: Any) -> None:
        if addr not in self.subscribers[section].values():
            self.subscribers[section][self.monitor(addr)] = addr

    # ------------------------------------------------------------ calls
    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, GetCouchJobs):
            msg = GetConfig("couch_jobs", msg.subscriber)
        if isinstance(msg, GetConfig):
            if msg.section not in self.values:
                return Failure(ConfigError(msg.section, "", None, "not a run-time section"))
            if msg.subscriber is not None:
                self._subscribe(msg.section, msg.subscriber)
            return self.generation, dict(self.values[msg.section])
        if isinstance(msg, SetConfig):
            return self._set(msg, from_)
        return super().handle_call(msg, from_)

    def _set(self, msg: SetConfig, from_: Any) -> Any:
        section, key = msg.section, msg.key
        try:
            value = parse_runtime_value(section, key, msg.value)
        except ConfigError as exc:
            return Failure(exc)
        persist_to = self.path if msg.persist and self.path else None
        if persist_to is not None:
            try:
                write_value(persist_to, section, key, format_value(value))
            except ConfigWriteError as exc:
                report(
                    "config_write_failed",
                    logging.ERROR,
                    section=section,
                    key=key,
                    value=value,
                    file=persist_to,
                    reason=exc.why,
                )
                return Failure(exc)
        old = self.values[section][key]
        self.values[section][key] = value
        self.generation += 1
        report(
            "config_changed",
            section=section,
            key=key,
            value=value,
            old=old,
            persisted=persist_to or False,
            generation=self.generation,
        )
        change = CHANGED[section](dict(self.values[section]), self.generation)
        fan_out(self, list(self.subscribers[section].values()), change, APPLY_TIMEOUT, lambda: self.reply(from_, old))
        return NOREPLY

    # ------------------------------------------------------------- info
    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, Down) and any(msg.ref in s for s in self.subscribers.values()):
            for subscribers in self.subscribers.values():
                subscribers.pop(msg.ref, None)
            return
        super().handle_info(msg)

    def format_status(self) -> dict:
        return {
            "generation": self.generation,
            "values": self.values,
            "path": self.path,
            "subscribers": {section: len(s) for section, s in self.subscribers.items()},
        }


class ConfigClient:
    """The keeper's calls from a plain process (the HTTP process).

    Args:
        client: a :class:`supervision.Client` of the node.
        timeout: seconds to wait for an answer (a change waits for the
            running actors to apply it).
    """

    def __init__(self, client: Any, timeout: float = APPLY_TIMEOUT + 10.0) -> None:
        self.client = client
        self.timeout = timeout

    def section(self, section: str) -> dict:
        """The current values of a run-time section.

        Raises:
            NoProc: the node runs no keeper (or it is restarting).
        """
        return self.client.call(CONFIG_SERVER, GetConfig(section), self.timeout)[1]

    def set(self, section: str, key: str, value: Any, persist: bool = True) -> Any:
        """Set one key at run time (and in the config file, with ``persist``); returns the old value.

        Raises:
            ConfigError: unknown key or bad value (nothing changed).
            ConfigWriteError: the config file could not be rewritten (nothing changed).
            NoProc: the node runs no keeper (or it is restarting).
        """
        return self.client.call(CONFIG_SERVER, SetConfig(section, key, value, persist), self.timeout)


__all__ = ["ConfigServer", "ConfigClient", "config_children", "config_args", "fan_out", "CONFIG_SERVER"]
