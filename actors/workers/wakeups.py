"""How a worker host's dispatcher learns that a type may have work, or is
paused: the store's watches and due timers.

Principle: the dispatcher never polls. A claim that leaves a type's queue
empty arms the type's pending watch in the store; the store's watch thread
only sets the type's ``fired`` flag and wakes the actor through its waker
pipe (:class:`supervision.waker.Waker`: the one way another thread reaches
the actor), and the actor, in its own loop, marks the type as maybe having
work and runs a step. A type whose next job is scheduled later gets a
timer at that time. Each served type's pause key is watched the same way
for as long as the host runs, so a pause takes back the jobs the host holds
claimed and not started at once, even while it claims nothing (its workers
busy with long runs). Should a wake-up be lost on its way all the same,
the lifeline (:mod:`actors.workers.leases`) looks for each type's pending
work once a type timeout. A mixin of the dispatcher, whose state it reads.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable

from fdblayer.jobs import type_controls
from fdblayer.jobs.keys import DEFAULT_LAYOUT

from actors.workers.runs import STEP_RETRY, TypeSlot
from actors.workers.state import DispatcherState

__all__ = ["TypeWakeups"]

log = logging.getLogger("otpjobs.workers")


class TypeWakeups(DispatcherState):
    """The served types' store watches and due timers."""

    def _arm_watch(self, job_type: Any, slot: TypeSlot, watch: Any) -> None:
        """Wait on the type's pending ``watch`` (the one before it is cancelled);
        it fires in the store's thread, which only flags the type and wakes the actor."""
        if slot.watch is not None:
            slot.watch.cancel()
        slot.watch = watch
        self._wake_on(watch, lambda: setattr(slot, "fired", True))

    def _wake_on(self, watch: Any, mark: Callable[[], None]) -> None:
        """When ``watch`` fires: ``mark`` (in the store's watch thread: it
        only sets a flag) and wake the actor. A watch cancelled because a
        newer one replaced it is no news: nothing happens."""

        def fired(w: Any) -> None:
            if not w.cancelled():
                mark()
                self.waker.wake()

        watch.on_ready(fired)

    def _arm_due(self, job_type: Any, slot: TypeSlot, due: int, now: float) -> None:
        """A step at wall time ``due`` (epoch s), the type's next scheduled job,
        unless one as early or earlier is armed already."""
        if slot.due_at is not None and slot.due_at <= due:
            return
        if slot.due_timer is not None:
            self.cancel_timer(slot.due_timer)
        slot.due_at = due

        def on_due(slot: TypeSlot = slot) -> None:
            slot.due_at = slot.due_timer = None
            slot.maybe_work = True
            self._kick()

        slot.due_timer = self.start_timer(max(0.0, due - time.time()) + 0.001, on_due, real=True)

    def _watch_controls(self, job_types: list) -> None:
        """Read the types' pauses and timeouts and watch them and their
        schedules (one round trip), then act on what was read: a pause
        (:meth:`_pause_seen`), the leases' pace (:meth:`_lease_timeouts_seen`)
        and the schedules (read again). A store error: tried again shortly
        (the claims read the pause, the lifeline the timeouts and the
        periodic read the schedules meanwhile)."""
        try:
            found = type_controls.watch_controls(self.db, DEFAULT_LAYOUT, job_types)
        except Exception as exc:  # noqa: BLE001 - a store error: tried again shortly
            log.warning("controls_watch_failed host=%s error=%r (retrying in %.1fs)", self.host, exc, STEP_RETRY)
            self.start_timer(STEP_RETRY, lambda: self._watch_controls(job_types), real=True)
            return
        for job_type, controls in found.items():
            slot = self.types[job_type]
            for old in slot.control_watches:
                old.cancel()
            slot.control_watches = (controls.pause_watch, controls.timeout_watch, controls.schedule_watch)
            for watch in slot.control_watches:
                self._wake_on(watch, functools.partial(setattr, slot, "controls_fired", True))
            slot.lease_timeout = controls.timeout
            self._pause_seen(job_type, controls.paused)
        self._lease_timeouts_seen()
        self._read_schedules()

    def _pause_seen(self, job_type: Any, paused: bool) -> None:
        """The type is paused (its claimed jobs go back to the queue) or not
        (it may have work again), as a claim or the pause watch read it."""
        slot = self.types[job_type]
        if paused and not slot.paused:
            slot.paused = True
            log.info("type_paused host=%s type=%s", self.host, job_type)
            self._give_back_type(job_type)
        elif not paused and slot.paused:
            slot.paused = False
            slot.maybe_work = True
            log.info("type_resumed host=%s type=%s", self.host, job_type)

    def _watch_fired(self) -> None:
        """The waker's callback, in the actor: the flagged types may have
        work, or their pause changed."""
        changed = [t for t, slot in self.types.items() if slot.controls_fired]
        if changed:
            for job_type in changed:
                self.types[job_type].controls_fired = False
            self._watch_controls(changed)
        for slot in self.types.values():
            if slot.fired:
                slot.fired = False
                slot.maybe_work = True
        if self.flush_queued or self.outcomes:
            self._kick()  # a step is on its way, or outcomes wait: one step for both
        else:
            self._flush()  # new work on an idle host: claim it now, not one message later
