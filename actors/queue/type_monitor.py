"""The linked helper of a notifier: wait on the type's activity watch.

A :class:`TypeMonitor` is spawn-linked by its notifier. It reads the type's
activity versionstamp and arms a store watch on it in one transaction; when
the stamp differs from the last one seen it tells the notifier
(``TypeUpdated(vs)``), no more often than once per holdoff. It never blocks
its message loop: the watch's callback writes a byte to a pipe that the
actor watches (Thespian's ThespianWatch), so a commit anywhere wakes it
within milliseconds and its own messages (including shutdown) still flow.
``timeout`` (the seed's type_monitor_timeout_msec; None is infinity)
re-arms the watch periodically even without a change. A
:class:`~actors.settings.config.CouchJobsChanged` call (from the notifier) sets both
at run time: a notification waiting out the old holdoff is re-timed with the
new one, and the re-arm timer restarts with the new timeout.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import fdblayer
from fdblayer.jobs import activity
from fdblayer.jobs.keys import DEFAULT_LAYOUT
from supervision import GenServer
from supervision.waker import Waker

from actors.settings.config import CouchJobsChanged, GetCouchJobsInUse
from actors.settings.schema import INFINITY
from actors.settings.schema import couch_jobs_settings


class _Timer(enum.Enum):
    """The monitor's own timer messages."""

    REARM = "type_monitor_rearm"
    NOTIFY = "type_monitor_notify"


REARM, NOTIFY = _Timer.REARM, _Timer.NOTIFY

HOLDOFF_KEY = "type_monitor_holdoff_msec"
TIMEOUT_KEY = "type_monitor_timeout_msec"


def type_monitor_settings(couch_jobs: dict) -> dict:
    """``holdoff`` and ``timeout`` (seconds; None is infinity) from ``[couch_jobs]``."""
    typed = couch_jobs_settings(couch_jobs)
    return {"holdoff": typed.type_monitor_holdoff, "timeout": typed.type_monitor_timeout}


@dataclass(frozen=True)
class TypeUpdated:
    """The type's activity versionstamp is now ``vs``."""

    vs: Any


class TypeMonitor(GenServer):
    """Tells its parent notifier when the type's activity stamp changes."""

    def init(self, args: Any) -> None:
        self.type = args["type"]
        self.vs = args.get("vs")
        self.holdoff = args["holdoff"]
        self.timeout = args["timeout"]
        self.generation = args.get("generation", 0)
        self.db = fdblayer.open(args["store"])
        self.last_notify = float("-inf")
        self.notify_pending = False
        self.notify_timer: int | None = None
        self.watch: Any = None
        self.timer: int | None = None
        self.waker = Waker(self, self._check)
        self._check()

    def _check(self) -> None:
        """Read the stamp, arm a new watch, and notify if the stamp moved."""
        old, self.watch = self.watch, None
        if old is not None:
            old.cancel()
        self.cancel_timer(self.timer)
        vs, self.watch = activity.get_activity_vs_and_watch(self.db, DEFAULT_LAYOUT, self.type)
        self.watch.on_ready(self._signal)
        if self.timeout is not None:
            self.timer = self.send_after(self.timeout, REARM)
        if vs != self.vs:
            self.vs = vs
            self._notify_after_holdoff()

    def _signal(self, watch: Any = None) -> None:
        """Watch callback (runs on the store's watcher thread): wake the actor.

        A watch replaced by ``_check`` (a re-arm) resolves as cancelled: that
        is no news, and waking on it would re-arm again at once (a busy loop)."""
        if watch is not None and watch is not self.watch and watch.cancelled():
            return
        self.waker.wake()

    def _notify_after_holdoff(self) -> None:
        if self.notify_pending:
            return
        wait = self.holdoff - (self.clock.monotonic() - self.last_notify)
        if wait > 0:
            self.notify_pending = True
            self.notify_timer = self.send_after(wait, NOTIFY)
        else:
            self._notify()

    def _notify(self) -> None:
        self.notify_pending = False
        self.notify_timer = None
        self.last_notify = self.clock.monotonic()
        self.send(self.parent, TypeUpdated(self.vs))

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, CouchJobsChanged):
            if msg.newer_than(self.generation):
                self.generation = msg.generation
                self._apply(**type_monitor_settings(msg.values))
            return "ok"
        if isinstance(msg, GetCouchJobsInUse):
            return {
                HOLDOFF_KEY: round(self.holdoff * 1000),
                TIMEOUT_KEY: INFINITY if self.timeout is None else round(self.timeout * 1000),
            }
        return super().handle_call(msg, from_)

    def _apply(self, holdoff: float, timeout: float | None) -> None:
        if holdoff != self.holdoff:
            self.holdoff = holdoff
            if self.notify_pending:  # re-time the waiting notification with the new holdoff
                self.cancel_timer(self.notify_timer)
                self.notify_pending = False
                self._notify_after_holdoff()
        if timeout != self.timeout:
            self.timeout = timeout
            self.cancel_timer(self.timer)
            self.timer = None if timeout is None else self.send_after(timeout, REARM)

    def handle_info(self, msg: Any) -> None:
        if msg == NOTIFY:
            self._notify()
        elif msg == REARM:
            self.timer = None
            self._check()
        else:
            super().handle_info(msg)

    def terminate(self, reason: Any) -> None:
        if self.watch is not None:
            self.watch.cancel()
        self.waker.close()
        self.db.close()
