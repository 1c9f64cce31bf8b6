"""Timers of a :class:`~supervision.gen_server.GenServer` (a mixin): on the
real clock through Thespian's wakeups, or on a manual clock that only
``AdvanceClock`` moves (tests inject it instead of sleeping).

Tokens are returned for :meth:`Timers.cancel_timer`; a cancelled timer's
wakeup still arrives and is ignored.
"""

from __future__ import annotations

import heapq
import itertools
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable

from . import messages as m

if TYPE_CHECKING:
    from .clock import Clock

#: Longest single wait handed to Thespian (under 12 days); longer timers are
#: armed in steps of this, so no delay overflows its date arithmetic or the
#: poll timeout it becomes (epoll takes at most 2^31 - 1 ms).
MAX_TIMER_STEP = 1e6


class Timers:
    """The timer methods of a GenServer (which supplies ``clock``,
    ``handle_info``, ``send`` and Thespian's ``wakeupAfter``)."""

    if TYPE_CHECKING:  # what the GenServer supplies, for the type checker
        clock: Clock

        def handle_info(self, msg: Any) -> None: ...
        def send(self, target: Any, msg: Any) -> None: ...
        def wakeupAfter(self, timePeriod: timedelta, payload: Any = None) -> None: ...  # noqa: N802, N803

    def _init_timers(self) -> None:
        self._timers: dict[int, tuple[Callable[[], None], bool]] = {}
        self._timer_rest: dict[int, float] = {}  # token -> seconds left after the armed step
        self._timer_heap: list[tuple[float, int]] = []
        self._timer_ids = itertools.count(1)

    def send_after(self, delay: float, msg: Any) -> int:
        """Deliver ``msg`` to ``handle_info`` after ``delay`` seconds of this
        actor's clock. Returns a token for :meth:`cancel_timer`."""
        return self.start_timer(delay, lambda: self.handle_info(msg))

    def start_timer(self, delay: float, callback: Callable[[], None], real: bool = False) -> int:
        """Run ``callback`` after ``delay`` seconds (``real`` ignores a manual clock)."""
        token = next(self._timer_ids)
        manual = self.clock.manual and not real
        deadline = (self.clock.monotonic() if manual else 0.0) + max(0.0, delay)
        self._timers[token] = (callback, manual)
        if manual:
            heapq.heappush(self._timer_heap, (deadline, token))
        else:
            self._arm_real(token, delay)
        return token

    def _arm_real(self, token: int, delay: float) -> None:
        """Arm a real timer; one past :data:`MAX_TIMER_STEP` is armed in steps
        (Thespian turns a delay into a date, which overflows past year 9999)."""
        delay = max(0.0, delay) if delay == delay else 0.0  # NaN fires at once
        step = min(delay, MAX_TIMER_STEP)
        if delay > step:
            self._timer_rest[token] = delay - step
        self.wakeupAfter(timedelta(seconds=step), payload=m.TimerFired(token))

    def cancel_timer(self, token: int | None) -> bool:
        """Cancel a timer; True if it had not fired yet."""
        return token is not None and self._timers.pop(token, None) is not None

    def _on_wakeup(self, payload: Any) -> None:
        if isinstance(payload, m.TimerFired):
            rest = self._timer_rest.pop(payload.token, None)
            if rest is not None and payload.token in self._timers:
                self._arm_real(payload.token, rest)
                return
            entry = self._timers.pop(payload.token, None)
            if entry is not None:
                entry[0]()

    def _on_advance_clock(self, adv: m.AdvanceClock) -> None:
        if self.clock.manual:
            self.clock.advance(adv.seconds)  # type: ignore[attr-defined]
            now = self.clock.monotonic()
            while self._timer_heap and self._timer_heap[0][0] <= now:
                _, token = heapq.heappop(self._timer_heap)
                entry = self._timers.pop(token, None)
                if entry is not None:
                    entry[0]()
        if adv.reply_to is not None:
            self.send(adv.reply_to, m.ClockAdvanced(self.clock.monotonic()))
