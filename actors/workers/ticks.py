"""A worker host's periodic jobs: cron ticks enqueued exactly once across hosts.

Principle: the schedules live in the store (:mod:`fdblayer.jobs.schedules`);
every host serving a type arms a timer at its next tick and fires it with
one serializable transaction, so of several hosts exactly one enqueues the
tick's job (id ``tick-<epoch>``). Each served type's schedule key is
watched (:meth:`~actors.workers.wakeups.TypeWakeups._watch_controls`), so
a schedule set, changed or removed takes effect at once; the
schedules are also read again every :data:`SCHEDULE_CHECK` seconds (a
watch lost on its way). Ticks missed while no host ran are not replayed
(only the latest). A mixin of the dispatcher, whose state it reads.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fdblayer.jobs.keys import DEFAULT_LAYOUT

from fdblayer.jobs import schedules as periodic

from actors.workers.state import DispatcherState
from actors.workers.runs import TypeSlot
from actors.workers.schedule import next_tick, previous_tick

__all__ = ["PeriodicTicks", "SCHEDULE_CHECK"]

log = logging.getLogger("otpjobs.workers")

#: Seconds between reads of the types' periodic schedules.
SCHEDULE_CHECK = 10.0


class PeriodicTicks(DispatcherState):
    """The cron timers of a dispatcher."""

    def _check_schedules(self) -> None:
        self._read_schedules()
        self.start_timer(SCHEDULE_CHECK, self._check_schedules, real=True)

    def _read_schedules(self) -> None:
        """Read the served types' schedules: arm each type's next tick (a
        changed or removed schedule's timer is cancelled) and fire the latest
        missed tick."""
        try:
            schedules = periodic.get_schedules(self.db, DEFAULT_LAYOUT)
        except Exception as exc:  # noqa: BLE001 - a store hiccup delays ticks, never stops the host
            log.warning("schedules_unreadable host=%s error=%r", self.host, exc)
            schedules = {}
        now = time.time()
        for job_type, slot in self.types.items():
            schedule = schedules.get(job_type)
            cron = None if schedule is None else schedule.cron
            if cron != slot.schedule and slot.tick_timer is not None:
                self.cancel_timer(slot.tick_timer)
                slot.tick_timer = slot.tick_at = None
            slot.schedule = cron
            if schedule is None or cron is None:
                continue
            missed = previous_tick(cron, now)
            if missed is not None and (schedule.last is None or schedule.last < missed):
                self._fire(job_type, missed, cron)
            if slot.tick_timer is None:
                self._arm_tick(job_type, slot, now)

    def _arm_tick(self, job_type: Any, slot: TypeSlot, now: float) -> None:
        tick = None if slot.schedule is None else next_tick(slot.schedule, now)
        if tick is None:
            return
        slot.tick_at = tick

        def on_tick(job_type: Any = job_type, slot: TypeSlot = slot, tick: int = tick) -> None:
            slot.tick_timer = slot.tick_at = None
            if slot.schedule is None:
                return
            if self._fire(job_type, tick, slot.schedule) == periodic.CHANGED:
                self._read_schedules()  # changed or removed since it was read: arm the new one at once
            elif slot.tick_timer is None:
                self._arm_tick(job_type, slot, max(time.time(), tick))

        slot.tick_timer = self.start_timer(max(0.0, tick - now) + 0.001, on_tick, real=True)

    def _fire(self, job_type: Any, tick: int, cron: str) -> str:
        """Fire ``tick`` of the schedule ``cron`` (see :func:`periodic.fire_tick`)."""
        job_id = f"tick-{tick}"
        try:
            fired = periodic.fire_tick(self.db, DEFAULT_LAYOUT, job_type, tick, job_id, cron)
        except Exception as exc:  # noqa: BLE001 - a store hiccup skips a tick, never stops the host
            log.warning("tick_failed host=%s type=%s tick=%d error=%r", self.host, job_type, tick, exc)
            return periodic.SEEN
        if fired == periodic.FIRED:
            log.info("tick_enqueued host=%s type=%s job=%s", self.host, job_type, job_id)
        return fired
