"""OTP's rule for a child's exit (``supervision.supervisor.on_child_exit``)
as a table: which children restart, and when a child's spec is forgotten,
by strategy, restart type and exit reason. The intensity window is
``add_restart``'s (tests/supervision/test_intensity.py); the real
supervisors applying both are tested with real processes beside these."""

from __future__ import annotations

import pytest

from supervision.childspec import Restart, Strategy
from supervision.supervisor import ExitDecision, on_child_exit

P, TR, TE = Restart.PERMANENT, Restart.TRANSIENT, Restart.TEMPORARY
O4O, O4A, R4O, S4O = (Strategy.ONE_FOR_ONE, Strategy.ONE_FOR_ALL, Strategy.REST_FOR_ONE, Strategy.SIMPLE_ONE_FOR_ONE)
KIDS = ["a", "b", "c", "d"]
CRASH, NORMAL, SHUTDOWN, SHUTDOWN_WHY, KILLED = RuntimeError("boom"), "normal", "shutdown", ("shutdown", "x"), "killed"

CASES = [
    # strategy, restart type, reason, child exited -> restarted group, forgotten
    (O4O, P, CRASH, "b", ("b",), False),
    (O4O, P, NORMAL, "b", ("b",), False),  # permanent: even a normal exit
    (O4O, TR, CRASH, "b", ("b",), False),
    (O4O, TR, KILLED, "b", ("b",), False),  # killed is abnormal
    (O4O, TR, NORMAL, "b", (), False),  # transient: a normal exit stays down, spec kept
    (O4O, TR, SHUTDOWN, "b", (), False),
    (O4O, TR, SHUTDOWN_WHY, "b", (), False),  # {shutdown, _} is normal too
    (O4O, TE, CRASH, "b", (), True),  # temporary: never, and forgotten
    (O4O, TE, NORMAL, "b", (), True),
    (O4A, P, CRASH, "b", ("a", "b", "c", "d"), False),  # every child, in start order
    (O4A, TR, NORMAL, "b", (), False),
    (O4A, TE, CRASH, "b", (), True),
    (R4O, P, CRASH, "b", ("b", "c", "d"), False),  # the child and those started after it
    (R4O, P, CRASH, "a", ("a", "b", "c", "d"), False),
    (R4O, P, CRASH, "d", ("d",), False),
    (R4O, TR, SHUTDOWN, "c", (), False),
    (S4O, P, CRASH, "c", ("c",), False),
    (S4O, TR, NORMAL, "c", (), True),  # a dynamic child that stays down is forgotten
    (S4O, TE, CRASH, "c", (), True),
]


@pytest.mark.parametrize(
    "strategy, restart, reason, child, group, forget",
    CASES,
    ids=[f"{c[0].value}-{c[1].value}-{c[2]!r}-{c[3]}" for c in CASES],
)
def test_exit_decision_table(strategy, restart, reason, child, group, forget) -> None:
    dynamic = strategy is Strategy.SIMPLE_ONE_FOR_ONE
    assert on_child_exit(strategy, restart, reason, KIDS, child, dynamic) == ExitDecision(group, forget)
