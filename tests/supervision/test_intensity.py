"""The restart intensity rule (``supervision.supervisor.add_restart``) as a
table, as OTP's supervisor applies it: at most ``intensity`` restarts in any
``period`` seconds; a restart ``period`` or more seconds old no longer counts."""

from __future__ import annotations

import pytest

from supervision.supervisor import add_restart

CASES = [
    # (restarts before, now, intensity, period) -> (allowed, restarts after)
    ((), 0.0, 1, 5, True, (0.0,)),
    ((0.0,), 1.0, 1, 5, False, (0.0, 1.0)),  # two within 5 s: over 1
    ((0.0,), 5.0, 1, 5, True, (5.0,)),  # exactly a period old: dropped (OTP: Now - T < Period)
    ((0.0,), 4.999, 1, 5, False, (0.0, 4.999)),
    ((), 0.0, 0, 5, False, (0.0,)),  # intensity 0: no restart at all
    ((0.0, 1.0, 2.0), 3.0, 3, 10, False, (0.0, 1.0, 2.0, 3.0)),
    ((0.0, 1.0, 2.0), 10.5, 3, 10, True, (1.0, 2.0, 10.5)),
    ((0.0, 1.0, 2.0), 11.5, 3, 10, True, (2.0, 11.5)),
    ((100.0,), 100.0, 1, 1, False, (100.0, 100.0)),  # two at the same instant
]


@pytest.mark.parametrize("before, now, intensity, period, allowed, after", CASES)
def test_restart_intensity_table(before, now, intensity, period, allowed, after) -> None:
    assert add_restart(before, now, intensity, period) == (allowed, after)


def test_the_window_slides_over_a_long_run_of_spaced_restarts() -> None:
    restarts: tuple = ()
    for n in range(100):  # one restart every 3 s never exceeds 2 in 5 s
        allowed, restarts = add_restart(restarts, n * 3.0, 2, 5)
        assert allowed and len(restarts) <= 2
