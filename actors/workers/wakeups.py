"""How a worker host's dispatcher learns that a type may have work: the store's watch and due timers.

Principle: the dispatcher never polls. A claim that leaves a type's queue
empty arms the type's pending watch in the store; the store's watch thread
only sets the type's ``fired`` flag and wakes the actor through its waker
pipe (:class:`supervision.waker.Waker`: the one way another thread reaches
the actor), and the actor, in its own loop, marks the type as maybe having
work and runs a step. A type whose next job is scheduled later gets a
timer at that time. A mixin of the dispatcher, whose state it reads.
"""

from __future__ import annotations

import time
from typing import Any

from actors.workers.runs import TypeSlot
from actors.workers.state import DispatcherState

__all__ = ["TypeWakeups"]


class TypeWakeups(DispatcherState):
    """The served types' store watches and due timers."""

    def _arm_watch(self, job_type: Any, slot: TypeSlot, watch: Any) -> None:
        """Wait on the type's pending ``watch`` (the one before it is cancelled);
        it fires in the store's thread, which only flags the type and wakes the actor."""
        if slot.watch is not None:
            slot.watch.cancel()
        slot.watch = watch

        def fired(_w: Any, job_type: Any = job_type) -> None:  # the store's watch thread
            self.types[job_type].fired = True
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

    def _watch_fired(self) -> None:
        """The waker's callback, in the actor: the flagged types may have work."""
        for slot in self.types.values():
            if slot.fired:
                slot.fired = False
                slot.maybe_work = True
        if self.flush_queued or self.outcomes:
            self._kick()  # a step is on its way, or outcomes wait for the messages queued behind them
        else:
            self._flush()  # new work on an idle host: claim it now, not one message later
