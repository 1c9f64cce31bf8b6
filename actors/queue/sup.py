"""The queue's supervision tree (the seed's couch_jobs_sup).

rest_for_one, 3 restarts in 10 s, children in order: the store check
(returns ignore), the activity monitor supervisor, the notifier
supervisor, the jobs server. A crashed notifier supervisor therefore also
restarts the jobs server, which starts fresh per-type children.

The ``[couch_jobs]`` settings come from the node's settings keeper
(:class:`actors.settings.keeper.ConfigServer`, CouchDB's config server), a
sibling started before this tree: the jobs server reads the current values
there when it starts and is told of every change, which it passes on to its
per-type actors. So a restarted server, activity monitor, notifier or type
monitor, or the whole tree restarted, runs with the latest values.
"""

from __future__ import annotations

from typing import Any

from supervision import ChildSpec, ChildType, Restart, Supervisor

from actors.queue.activity_monitor import ActivityMonitorSup
from actors.settings.config import Config
from actors.queue.store_check import StoreCache
from actors.queue.server import JobsServer
from actors.names import ACTIVITY_MONITOR_SUP, JOBS_SERVER, JOBS_SUP, NOTIFIER_SUP
from actors.queue.notifier import NotifierSup


def jobs_args(config: Config) -> dict:
    """The plain-data args every queue actor gets: store URL and [couch_jobs]
    (the start-time values, used when the node runs no settings keeper)."""
    return {"store": config.node.store, "couch_jobs": config.section("couch_jobs")}


def jobs_children(config: Config, *, config_server: bool = True) -> list[ChildSpec]:
    """The node-level child specs of the queue: the settings keeper, then couch_jobs_sup.

    Args:
        config: the node's configuration.
        config_server: False when the caller starts the keeper itself
            (:func:`actors.node.root.root_children` makes it the node's first
            child, for every tree); True gives a queue started alone its
            run-time ``[couch_jobs]`` (and ``[replicator]``) settings.
    """
    from actors.settings.keeper import config_children

    keeper = config_children(config) if config_server else []
    return keeper + [ChildSpec("couch_jobs_sup", JobsSup, jobs_args(config), type=ChildType.SUPERVISOR, name=JOBS_SUP)]


class JobsSup(Supervisor):
    """rest_for_one: store check, activity monitor sup, notifier sup, server."""

    def children(self, args: Any) -> tuple:
        flags = {"strategy": "rest_for_one", "intensity": 3, "period": 10}
        return flags, [
            ChildSpec("couch_jobs_fdb", StoreCache, args, restart=Restart.TRANSIENT),
            ChildSpec(
                "couch_jobs_activity_monitor_sup",
                ActivityMonitorSup,
                args,
                shutdown="brutal_kill",
                type=ChildType.SUPERVISOR,
                name=ACTIVITY_MONITOR_SUP,
            ),
            ChildSpec(
                "couch_jobs_notifier_sup",
                NotifierSup,
                args,
                shutdown="brutal_kill",
                type=ChildType.SUPERVISOR,
                name=NOTIFIER_SUP,
            ),
            ChildSpec("couch_jobs_server", JobsServer, args, shutdown="brutal_kill", name=JOBS_SERVER),
        ]


__all__ = ["JobsSup", "jobs_children", "jobs_args"]
