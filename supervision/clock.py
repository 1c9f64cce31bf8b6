"""Clocks that actors read, injectable so tests of timeouts need not sleep.

An actor reads time only through its clock: ``monotonic()`` for intervals and
timers, ``time()`` for wall-clock timestamps that are persisted. A
:class:`ManualClock` moves only when told to (``advance``), and a
:class:`~supervision.gen_server.GenServer` running on one fires its timers
when its clock is advanced by an ``AdvanceClock`` message.
"""

from __future__ import annotations

import time as _time


class Clock:
    """The real clock."""

    manual = False

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going back."""
        return _time.monotonic()

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        return _time.time()


class ManualClock(Clock):
    """A clock that moves only by :meth:`advance`.

    Args:
        start: the initial monotonic reading.
        wall: the initial wall-clock reading (defaults to the real time now).
    """

    manual = True

    def __init__(self, start: float = 0.0, wall: float | None = None) -> None:
        self._mono = float(start)
        self._wall_offset = (_time.time() if wall is None else float(wall)) - self._mono

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._mono + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (must not be negative)."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards ({seconds})")
        self._mono += seconds


def make_clock(spec: object) -> Clock:
    """Build a clock from plain data: ``None``/``"real"`` or ``"manual"`` or a Clock."""
    if isinstance(spec, Clock):
        return spec
    if spec in (None, "real"):
        return Clock()
    if spec == "manual":
        return ManualClock()
    raise ValueError(f"unknown clock {spec!r}: use 'real' or 'manual'")
