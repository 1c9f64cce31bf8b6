"""The queue's supervision tree (the seed's couch_jobs_sup) and its run-time settings.

rest_for_one, 3 restarts in 10 s, children in order: the settings keeper
(:class:`JobsConfig`), the store check (returns ignore), the activity
monitor supervisor, the notifier supervisor, the jobs server. A crashed
notifier supervisor therefore also restarts the jobs server, which starts
fresh per-type children.

The keeper plays the part of CouchDB's config server for ``[couch_jobs]``:
it holds the section's current values (the node's start-time ones until
``PUT /_node/_local/_config/couch_jobs/{key}`` changes one), the jobs
server reads them there when it starts and is told of every change, which
it passes on to its per-type actors. So a restarted server, activity
monitor, notifier or type monitor runs with the latest values. The values
live in the keeper only, as the ``[replicator]`` ones live in the
scheduler: the config file is not rewritten, and a node restart (or a
restart of the keeper itself, which restarts the whole queue tree) starts
again from the file.
"""
from __future__ import annotations

import logging
from typing import Any

from supervision import NOREPLY, ChildSpec, Down, GenServer, Supervisor
from supervision.messages import Failure
from supervision.reports import report

from .activity_monitor import ActivityMonitorSup
from .config import Config, ConfigError, CouchJobsChanged, GetCouchJobs, SetCouchJobs, parse_value
from .jobs_cache import StoreCache
from .jobs_server import JOBS_CONFIG, JobsServer, fan_out
from .names import ACTIVITY_MONITOR_SUP, JOBS_SERVER, JOBS_SUP, NOTIFIER_SUP
from .notifier import NotifierSup

log = logging.getLogger(__name__)

#: Seconds the keeper waits for the jobs server to apply a change before answering anyway.
APPLY_TIMEOUT = 20.0


def jobs_args(config: Config) -> dict:
    """The plain-data args every queue actor gets: store URL and [couch_jobs]."""
    return {"store": config.get("node", "store"), "couch_jobs": config.section("couch_jobs")}


def jobs_children(config: Config) -> list[ChildSpec]:
    """The node-level child spec of the queue tree."""
    return [ChildSpec("couch_jobs_sup", JobsSup, jobs_args(config), type="supervisor", name=JOBS_SUP)]


class JobsSup(Supervisor):
    """rest_for_one: settings keeper, store check, activity monitor sup, notifier sup, server."""

    def children(self, args: Any) -> tuple:
        flags = {"strategy": "rest_for_one", "intensity": 3, "period": 10}
        return flags, [
            ChildSpec("couch_jobs_config", JobsConfig, args, name=JOBS_CONFIG),
            ChildSpec("couch_jobs_fdb", StoreCache, args, restart="transient"),
            ChildSpec("couch_jobs_activity_monitor_sup", ActivityMonitorSup, args, shutdown="brutal_kill",
                      type="supervisor", name=ACTIVITY_MONITOR_SUP),
            ChildSpec("couch_jobs_notifier_sup", NotifierSup, args, shutdown="brutal_kill",
                      type="supervisor", name=NOTIFIER_SUP),
            ChildSpec("couch_jobs_server", JobsServer, args, shutdown="brutal_kill", name=JOBS_SERVER),
        ]


class JobsConfig(GenServer):
    """Keeps the ``[couch_jobs]`` values and tells subscribers of each change.

    Calls: :class:`~actors.config.GetCouchJobs` (``(generation, values)``;
    a subscriber is monitored and dropped when it exits) and
    :class:`~actors.config.SetCouchJobs` (validates; logs ``config_changed``;
    answers the old value once every subscriber applied the change, or after
    :data:`APPLY_TIMEOUT`).
    """

    def init(self, args: Any) -> None:
        self.values: dict = dict(args["couch_jobs"])
        self.generation = 0
        self.subscribers: dict[str, Any] = {}  # monitor ref -> address

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, GetCouchJobs):
            if msg.subscriber is not None and msg.subscriber not in self.subscribers.values():
                self.subscribers[self.monitor(msg.subscriber)] = msg.subscriber
            return self.generation, dict(self.values)
        if isinstance(msg, SetCouchJobs):
            return self._set(msg, from_)
        return super().handle_call(msg, from_)

    def _set(self, msg: SetCouchJobs, from_: Any) -> Any:
        try:
            value = parse_value("couch_jobs", msg.key, msg.value)
        except ConfigError as exc:
            return Failure(exc)
        old = self.values[msg.key]
        self.values[msg.key] = value
        self.generation += 1
        report("config_changed", section="couch_jobs", key=msg.key, value=value, old=old,
               generation=self.generation)
        change = CouchJobsChanged(dict(self.values), self.generation)
        fan_out(self, list(self.subscribers.values()), change, APPLY_TIMEOUT, lambda: self.reply(from_, old))
        return NOREPLY

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, Down) and msg.ref in self.subscribers:
            del self.subscribers[msg.ref]
        else:
            super().handle_info(msg)

    def format_status(self) -> dict:
        return {"generation": self.generation, "values": dict(self.values),
                "subscribers": len(self.subscribers)}


class CouchJobsConfigClient:
    """The keeper's calls from a plain process (the HTTP process).

    Args:
        client: a :class:`supervision.Client` of the node.
        timeout: seconds to wait for an answer (a change waits for the
            running actors to apply it).
    """

    def __init__(self, client: Any, timeout: float = APPLY_TIMEOUT + 10.0) -> None:
        self.client = client
        self.timeout = timeout

    def values(self) -> dict:
        """The current ``[couch_jobs]`` values.

        Raises:
            NoProc: the queue tree is not running.
        """
        return self.client.call(JOBS_CONFIG, GetCouchJobs(), self.timeout)[1]

    def set(self, key: str, value: Any) -> Any:
        """Set one key at run time; returns the old value.

        Raises:
            ConfigError: unknown key or bad value (nothing changed).
            NoProc: the queue tree is not running.
        """
        return self.client.call(JOBS_CONFIG, SetCouchJobs(key, value), self.timeout)


__all__ = ["JobsSup", "JobsConfig", "CouchJobsConfigClient", "jobs_children", "jobs_args", "JOBS_CONFIG"]
