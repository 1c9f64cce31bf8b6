"""The scheduler's supervisors (couch_replicator_scheduler_sup and its pairing).

Principle: job processes and the scheduler that decides about them live
under one ``rest_for_one`` supervisor, ``scheduler_sup`` first, as in
CouchDB's couch_replicator_sup. A scheduler crash restarts only the
scheduler: the jobs keep running under ``scheduler_sup`` and the new
scheduler adopts them. A ``scheduler_sup`` crash takes the scheduler down
with it, so no scheduler ever believes in jobs that are gone.

* :class:`SchedulerSup`: simple_one_for_one, temporary children (a crashed
  job is not entitled to an immediate restart: the scheduler decides, with
  backoff), intensity 10 in 3 s, shutdown 5 s.
* :class:`~actors.scheduler.host.JobHostSup`: the job hosts, each running
  many jobs as threads (jobs of ``"isolation": "thread"``, the default).
* :class:`SchedulerTree`: rest_for_one over the three (scheduler_sup, the
  hosts, the scheduler): a scheduler crash leaves every job running and
  the new scheduler adopts them from scheduler_sup and from the hosts.
* :func:`scheduler_children`: the tree as one child spec for a node's root.
"""

from __future__ import annotations

from typing import Any

from supervision import ChildSpec, ChildType, Restart, Strategy, Supervisor, SupFlags

from actors.settings.config import RUNTIME_KEYS, Config, node_name
from actors import names
from actors.scheduler.host import JobHostSup
from actors.scheduler.protocol import DEFAULT_HOSTS

#: Registered names (node-local) of the two actors.
SCHEDULER_SUP_NAME = names.SCHEDULER_SUP
SCHEDULER_NAME = names.SCHEDULER

JOB_START = "actors.scheduler.job:SchedulerJob"
SCHEDULER_START = "actors.scheduler.server:Scheduler"

#: The [replicator] keys of the scheduler (all of them change at run time).
SETTING_KEYS = RUNTIME_KEYS["replicator"]


class SchedulerSup(Supervisor):
    """simple_one_for_one supervisor of job actors; start_child(args) starts one."""

    def children(self, args: Any) -> tuple:
        flags = SupFlags(Strategy.SIMPLE_ONE_FOR_ONE, intensity=10, period=3)
        return flags, [ChildSpec("scheduler_job", JOB_START, None, restart=Restart.TEMPORARY, shutdown=5.0)]


class SchedulerTree(Supervisor):
    """rest_for_one: scheduler_sup, the job hosts, then the scheduler.

    args: ``{"settings": {...}, "clock": None | "manual", "sup_name", "name", "hosts"}``
    (``hosts``: how many job hosts, default :data:`~actors.scheduler.protocol.DEFAULT_HOSTS`).
    """

    def children(self, args: Any) -> tuple:
        sup_name = args.get("sup_name", SCHEDULER_SUP_NAME)
        name = args.get("name", SCHEDULER_NAME)
        hosts = args.get("hosts") or DEFAULT_HOSTS
        host_name = f"{name}.host.{{}}"
        flags = SupFlags(Strategy.REST_FOR_ONE, intensity=10, period=1)
        return flags, [
            ChildSpec("scheduler_sup", SchedulerSup, None, type=ChildType.SUPERVISOR, name=sup_name),
            ChildSpec(
                "job_hosts",
                JobHostSup,
                {"hosts": hosts, "name": host_name, "fence": args.get("fence")},
                type=ChildType.SUPERVISOR,
                name=f"{name}.hosts",
            ),
            ChildSpec(
                "scheduler",
                SCHEDULER_START,
                {
                    "settings": args.get("settings", {}),
                    "sup_name": sup_name,
                    "node_name": args.get("node_name"),
                    "fence": args.get("fence"),
                    "host_names": [host_name.format(i) for i in range(hosts)],
                },
                shutdown=5.0,
                name=name,
                clock=args.get("clock"),
            ),
        ]


def scheduler_settings(config: Config) -> dict:
    """The scheduler's start-time settings from the ``[replicator]`` section
    (in a node with a settings keeper it runs with the keeper's current ones)."""
    return {key: config.get("replicator", key) for key in SETTING_KEYS}


def scheduler_children(config: Config, *, clock: str | None = None, fence: str | None = None) -> list[ChildSpec]:
    """The scheduler tree as a node root child: ``[ChildSpec(scheduler_tree)]``.

    Args:
        config: the node's configuration (``[replicator]`` settings).
        clock: ``"manual"`` to drive the scheduler's clock from tests.
        fence: the node's lease fence file (:mod:`actors.scheduler.fence`),
            read by document jobs; None: they run unfenced.
    """
    args = {"settings": scheduler_settings(config), "clock": clock, "node_name": node_name(config), "fence": fence}
    return [ChildSpec("scheduler_tree", SchedulerTree, args, type=ChildType.SUPERVISOR)]
