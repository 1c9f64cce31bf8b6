"""Per-type activity monitors: re-enqueue jobs whose worker went silent.

One :class:`ActivityMonitor` runs per job type that has an activity timeout
(started by the jobs server under :class:`ActivityMonitorSup`). Every
timeout (plus jitter) it reads the type's activity versionstamp; jobs that
were running at the previous check and have not been updated since are put
back in the pending queue, and each is logged (``job_reenqueued``). When the
type's timeout changes, the versionstamp is reset, as the seed does, so a
shortened timeout cannot re-enqueue a job early; and a check finds the
change itself (it passes the timeout it waited), so a lengthened one cannot
either. A
:class:`~actors.settings.config.CouchJobsChanged` call sets the jitter of the next
check (``activity_monitor_max_jitter_msec``), as the seed reads it anew at
each check.
"""

from __future__ import annotations

import enum
import logging
import random
from typing import Any

import fdblayer
from fdblayer.jobs import activity
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import ChildSpec, GenServer, Restart, Supervisor

from actors.settings.config import CouchJobsChanged, GetCouchJobsInUse
from actors.settings.schema import seconds

log = logging.getLogger(__name__)

#: Seconds between checks while the type has no timeout (the seed's 5000 ms).
MISSING_TIMEOUT_CHECK = 5.0


class _Timer(enum.Enum):
    """The monitor's own timer message."""

    CHECK = "check_activity"


CHECK = _Timer.CHECK

JITTER_KEY = "activity_monitor_max_jitter_msec"


class ActivityMonitor(GenServer):
    """Re-enqueues a type's inactive jobs every timeout (+ jitter)."""

    def init(self, args: Any) -> None:
        self.type = args["type"]
        self.db = fdblayer.open(args["store"])
        self.max_jitter_msec = args["couch_jobs"][JITTER_KEY]
        self.generation = args.get("generation", 0)
        self.vs: Any = None
        self.timeout = 0.0
        self._schedule_check()

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, CouchJobsChanged):
            if msg.newer_than(self.generation):
                self.generation, self.max_jitter_msec = msg.generation, msg.values[JITTER_KEY]
            return "ok"
        if isinstance(msg, GetCouchJobsInUse):
            return {JITTER_KEY: self.max_jitter_msec}
        return super().handle_call(msg, from_)

    def handle_info(self, msg: Any) -> None:
        if msg == CHECK:
            self._check_activity()
            self._schedule_check()
        else:
            super().handle_info(msg)

    def terminate(self, reason: Any) -> None:
        self.db.close()

    def _check_activity(self) -> None:
        self.vs, job_ids = activity.check_inactive(self.db, DEFAULT_LAYOUT, self.type, self.vs, self.timeout)
        for job_id in job_ids:
            log.warning("job_reenqueued type=%r id=%r reason=inactive timeout=%s", self.type, job_id, self.timeout)

    def _schedule_check(self) -> None:
        timeout = activity.get_type_timeout(self.db, DEFAULT_LAYOUT, self.type)
        if timeout is None:
            self.vs, self.timeout = None, MISSING_TIMEOUT_CHECK
        elif timeout != self.timeout:
            self.vs, self.timeout = None, float(timeout)
        jitter = seconds("couch_jobs", JITTER_KEY, self.max_jitter_msec)
        assert jitter is not None  # its schema allows no infinity
        max_jitter = min(self.timeout / 2, jitter)
        self.send_after(self.timeout + random.uniform(0, max(max_jitter, 0.001)), CHECK)

    def format_status(self) -> dict:
        return {"type": self.type, "timeout": self.timeout, JITTER_KEY: self.max_jitter_msec}


class ActivityMonitorSup(Supervisor):
    """simple_one_for_one over activity monitors (temporary, 10 restarts in 3 s)."""

    def children(self, args: Any) -> tuple:
        flags = {"strategy": "simple_one_for_one", "intensity": 10, "period": 3}
        return flags, [
            ChildSpec("activity_monitor", ActivityMonitor, None, restart=Restart.TEMPORARY, shutdown="brutal_kill")
        ]
