"""The dispatcher's step planner as tables: (state, now) -> plan, on an injected clock.

No actor, no store, no process: :mod:`actors.workers.planner` is given
plain data and a made-up ``now``, and each case asserts the concrete plan.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from actors.workers import planner
from actors.workers.planner import (
    MARK_AFTER,
    STUCK_AFTER,
    AttemptEnd,
    End,
    LimitAction,
    Limits,
    WatchPlan,
    WorkerLoad,
)

NOW = 1000.0  # the injected monotonic clock
RUNNING_LONG = NOW - STUCK_AFTER - 0.01  # a sync run seen starting before the stuck threshold
RUNNING_BRIEF = NOW - STUCK_AFTER / 2  # one seen starting within it


def idle(n: int, **kw) -> WorkerLoad:
    return WorkerLoad(n, **kw)


@dataclass
class T:
    """A served type as the planner reads it."""

    maybe_work: bool = True
    is_async: bool = False
    max_attempts: int = 3


# ---------------------------------------------------------------- claim sizing
WANT_CASES = [
    # (id, loads, buffered sync, buffered async, limits, active, expected)
    (
        "idle pool, unmeasured: a job each plus one each",
        [idle(1), idle(2)],
        0,
        0,
        Limits(2, 1),
        True,
        {False: 4, True: 0},
    ),
    ("prefetch fills each low worker", [idle(1), idle(2)], 0, 0, Limits(2, 10), True, {False: 22, True: 0}),
    ("the buffer counts against the want", [idle(1), idle(2)], 5, 0, Limits(2, 10), True, {False: 17, True: 0}),
    (
        "a worker above half its prefetch gets no refill",
        [idle(1, sync_held=6), idle(2, sync_held=5)],
        0,
        0,
        Limits(2, 10),
        True,
        {False: 2 + 5, True: 0},
    ),
    (
        "a stuck worker is not refilled",
        [idle(1, sync_held=1, running_since=RUNNING_LONG), idle(2)],
        0,
        0,
        Limits(2, 4),
        True,
        {False: 2 + 4, True: 0},
    ),
    (
        "a brief run is not stuck",
        [idle(1, sync_held=1, running_since=RUNNING_BRIEF), idle(2)],
        0,
        0,
        Limits(2, 4),
        True,
        {False: 2 + 3 + 4, True: 0},
    ),
    (
        "a long mean run raises the stuck threshold",
        [idle(1, sync_held=1, running_since=NOW - 0.5)],
        0,
        0,
        Limits(1, 2, run_seconds=0.3),
        True,
        {False: 1 + 1, True: 0},
    ),
    ("draining or no pool: nothing", [idle(1), idle(2)], 0, 0, Limits(2, 10), False, {False: 0, True: 0}),
    ("no worker adopted yet: concurrency only", [], 0, 0, Limits(3, 10), True, {False: 3, True: 0}),
    (
        "async room per worker, less the async buffer",
        [idle(1, async_held=3), idle(2)],
        0,
        2,
        Limits(2, 1, async_limit=10, any_async=True),
        True,
        {False: 4, True: 7 + 10 - 2},
    ),
    (
        "a worker owing a release has no async room",
        [idle(1, owes_release=True), idle(2)],
        0,
        0,
        Limits(2, 1, async_limit=10, any_async=True),
        True,
        {False: 4, True: 10},
    ),
    (
        "async room ignores a stuck sync run",
        [idle(1, sync_held=1, running_since=RUNNING_LONG)],
        0,
        0,
        Limits(1, 1, async_limit=5, any_async=True),
        True,
        {False: 1, True: 5},
    ),
    ("an over-full buffer wants less than none", [idle(1)], 9, 0, Limits(1, 2), True, {False: -6, True: 0}),
]


@pytest.mark.parametrize(
    "loads, buffered_sync, buffered_async, limits, active, expected",
    [pytest.param(*case[1:], id=case[0]) for case in WANT_CASES],
)
def test_claim_sizing_follows_room_prefetch_and_the_buffer(
    loads, buffered_sync, buffered_async, limits, active, expected
):
    assert planner.wants(loads, buffered_sync, buffered_async, limits, NOW, active) == expected


@pytest.mark.parametrize(
    "types, want, expected",
    [
        pytest.param(
            {"a": T(), "b": T(max_attempts=5)},
            {False: 4, True: 0},
            [("a", 4, 3), ("b", 4, 5)],
            id="each sync type asks",
        ),
        pytest.param(
            {"a": T(maybe_work=False), "b": T()}, {False: 4, True: 0}, [("b", 4, 3)], id="a type without work is silent"
        ),
        pytest.param(
            {"a": T(), "b": T(is_async=True)},
            {False: 0, True: 6},
            [("b", 6, 3)],
            id="an async type asks the async want",
        ),
        pytest.param({"a": T(), "b": T()}, {False: 0, True: 0}, [], id="no want: no claim"),
        pytest.param({"a": T()}, {False: -2, True: 0}, [], id="a negative want: no claim"),
    ],
)
def test_claims_go_per_type_in_order(types, want, expected):
    assert planner.claims(list(types), types, want) == expected


def test_claims_follow_the_rotating_order():
    types = {"a": T(), "b": T()}
    assert [c[0] for c in planner.claims(["b", "a"], types, {False: 1, True: 0})] == ["b", "a"]


@pytest.mark.parametrize(
    "outcomes, types, want, expected",
    [
        (True, {"a": T(maybe_work=False)}, {False: 0, True: 0}, True),
        (False, {"a": T()}, {False: 1, True: 0}, True),
        (False, {"a": T()}, {False: 0, True: 3}, False),
        (False, {"a": T(maybe_work=False)}, {False: 5, True: 0}, False),
    ],
)
def test_another_step_follows_outcomes_or_unmet_want(outcomes, types, want, expected):
    assert planner.step_again(outcomes, types, want) is expected


# ---------------------------------------------------------------- hand-out
S, A, LOST = False, True, None

HAND_OUT_CASES = [
    # (id, kinds, loads, limits, idle_only, to, kept, taken)
    (
        "idle workers first, then round the least loaded",
        [S, S, S, S],
        [idle(1, sync_held=1), idle(2), idle(3)],
        Limits(3, 4),
        False,
        ((0, 2), (1, 3), (2, 1), (3, 2)),
        (),
        4,
    ),
    (
        "ties go to the lower worker number",
        [S, S],
        [idle(2), idle(1)],
        Limits(2, 1),
        False,
        ((0, 1), (1, 2)),
        (),
        2,
    ),
    (
        "no worker holds more than its prefetch; the rest stays untouched",
        [S, S, S, S, S],
        [idle(1), idle(2)],
        Limits(2, 2),
        False,
        ((0, 1), (1, 2), (2, 1), (3, 2)),
        (),
        4,
    ),
    (
        "idle_only skips a worker still holding a job",
        [S, S],
        [idle(1, sync_held=1), idle(2)],
        Limits(2, 4),
        True,
        ((0, 2), (1, 2)),
        (),
        2,
    ),
    (
        "a worker above the refill mark gets nothing",
        [S],
        [idle(1, sync_held=3)],
        Limits(1, 4),
        False,
        (),
        (),
        0,
    ),
    (
        "a stuck worker gets no sync job",
        [S, S],
        [idle(1, sync_held=1, running_since=RUNNING_LONG), idle(2)],
        Limits(2, 4),
        False,
        ((0, 2), (1, 2)),
        (),
        2,
    ),
    (
        "a worker owing a release gets nothing",
        [S, A],
        [idle(1, owes_release=True), idle(2)],
        Limits(2, 1, async_limit=2, any_async=True),
        False,
        ((0, 2), (1, 2)),
        (),
        2,
    ),
    (
        "async runs go by async room, beside a stuck sync run",
        [A, A, A],
        [idle(1, sync_held=1, running_since=RUNNING_LONG), idle(2, async_held=1)],
        Limits(2, 1, async_limit=2, any_async=True),
        False,
        ((0, 1), (1, 1), (2, 2)),
        (),
        3,
    ),
    (
        "a sync job with no room is kept first in line while async ones go",
        [S, A, S],
        [idle(1, sync_held=1, running_since=RUNNING_LONG)],
        Limits(1, 1, async_limit=1, any_async=True),
        False,
        ((1, 1),),
        (0,),
        2,
    ),
    (
        "lost jobs are dropped, not handed",
        [LOST, S, LOST, S],
        [idle(1)],
        Limits(1, 2),
        False,
        ((1, 1), (3, 1)),
        (),
        4,
    ),
    ("no worker: nothing read", [S, S], [], Limits(2, 2), False, (), (), 0),
]


@pytest.mark.parametrize(
    "kinds, loads, limits, idle_only, to, kept, taken",
    [pytest.param(*case[1:], id=case[0]) for case in HAND_OUT_CASES],
)
def test_hand_out_serves_the_least_loaded_workers_with_room(kinds, loads, limits, idle_only, to, kept, taken):
    plan = planner.hand_out(kinds, loads, limits, NOW, idle_only)
    assert (plan.to, plan.kept, plan.taken) == (to, kept, taken)


def test_hand_out_reads_the_buffer_no_further_than_the_room():
    read = []

    def kinds():
        for i in range(1000):
            read.append(i)
            yield S

    plan = planner.hand_out(kinds(), [idle(1)], Limits(1, 3), NOW)
    assert plan.taken == 3
    assert len(read) == 4, "one look past the room, then it stops"


# ---------------------------------------------------------------- stuck detection and the run watch
@pytest.mark.parametrize(
    "since, run_seconds, expected",
    [
        (None, None, False),
        (NOW, None, False),
        (NOW - STUCK_AFTER * 0.9, None, False),  # within the threshold: not yet
        (NOW - STUCK_AFTER - 0.001, None, True),
        (NOW - 0.15, 0.1, False),  # twice the mean run is 0.2
        (NOW - 0.21, 0.1, True),
    ],
)
def test_a_worker_is_stuck_past_the_threshold_or_twice_the_mean_run(since, run_seconds, expected):
    assert planner.is_stuck(WorkerLoad(1, sync_held=1, running_since=since), NOW, run_seconds) is expected


WATCH_CASES = [
    # (id, loads, seen, draining, expected)
    ("idle workers: not busy", [idle(1), idle(2)], [], False, WatchPlan((), False, False)),
    (
        "a stuck worker gives back the sync runs behind its current one",
        [idle(1, sync_held=4, async_held=2, running_since=RUNNING_LONG), idle(2)],
        [],
        False,
        WatchPlan(((1, 3),), False, True),
    ),
    (
        "a brief run keeps its queue",
        [idle(1, sync_held=4, running_since=RUNNING_BRIEF)],
        [],
        False,
        WatchPlan((), False, True),
    ),
    (
        "nothing queued behind: nothing to take back",
        [idle(1, sync_held=1, running_since=RUNNING_LONG)],
        [],
        False,
        WatchPlan((), False, True),
    ),
    (
        "a worker owing a release is not asked again",
        [idle(1, sync_held=3, running_since=RUNNING_LONG, owes_release=True)],
        [],
        False,
        WatchPlan((), False, True),
    ),
    (
        "a draining host takes nothing back",
        [idle(1, sync_held=3, running_since=RUNNING_LONG)],
        [],
        True,
        WatchPlan((), False, True),
    ),
    (
        "async runs alone keep the watch busy",
        [idle(1, async_held=2, async_running=1)],
        [],
        False,
        WatchPlan((), False, True),
    ),
    (
        "a start older than MARK_AFTER is written now",
        [idle(1)],
        [NOW - MARK_AFTER * 2],
        False,
        WatchPlan((), True, False),
    ),
    ("a newer start waits for its end", [idle(1)], [NOW - MARK_AFTER / 2], False, WatchPlan((), False, False)),
]


@pytest.mark.parametrize(
    "loads, seen, draining, expected",
    [pytest.param(*case[1:], id=case[0]) for case in WATCH_CASES],
)
def test_the_run_watch_takes_back_from_stuck_workers_and_writes_old_starts(loads, seen, draining, expected):
    assert planner.watch(loads, seen, NOW, None, draining) == expected


@pytest.mark.parametrize(
    "marks, expected",
    [
        ([], []),
        ([(1, NOW - MARK_AFTER * 2, False), (2, NOW - MARK_AFTER / 2, False)], [1]),
        ([(1, NOW - 1.0, True), (2, NOW - 1.0, False), (3, NOW - MARK_AFTER * 0.9, False)], [2]),
        ([(7, NOW - 1.0, False), (5, NOW - 2.0, False)], [7, 5]),
    ],
    ids=["none", "only the older than MARK_AFTER", "not lost ones, not within the threshold", "in their order"],
)
def test_starts_older_than_mark_after_are_marked(marks, expected):
    assert planner.starts_due(marks, NOW) == expected


# ---------------------------------------------------------------- time limits
WALL = 1_700_000_000.0


@pytest.mark.parametrize(
    "started, limit, now, is_async, flags, expected",
    [
        (None, 10.0, WALL, False, {}, LimitAction.NONE),
        (WALL - 100, None, WALL, False, {}, LimitAction.NONE),
        (WALL - 5, 10.0, WALL, False, {}, LimitAction.NONE),
        (WALL - 11, 10.0, WALL, False, {}, LimitAction.STOP),
        (WALL - 11, 10.0, WALL, False, {"timed_out": True}, LimitAction.NONE),  # within the grace
        (WALL - 13, 10.0, WALL, False, {"timed_out": True}, LimitAction.KILL),
        (WALL - 13, 10.0, WALL, True, {"timed_out": True}, LimitAction.CANCEL),
        (WALL - 13, 10.0, WALL, True, {"timed_out": True, "cancelled": True}, LimitAction.NONE),
        (WALL - 18, 10.0, WALL, True, {"timed_out": True, "cancelled": True}, LimitAction.KILL),
        (WALL - 99, 10.0, WALL, False, {"timed_out": True, "killing": True}, LimitAction.NONE),
    ],
)
def test_a_run_past_its_limit_is_stopped_then_cancelled_then_killed(started, limit, now, is_async, flags, expected):
    assert planner.limit_action(started, limit, now, 2.0, is_async, **flags) is expected


# ---------------------------------------------------------------- an attempt's end
@pytest.mark.parametrize(
    "error, attempt, retry_now, expected",
    [
        (None, 1, False, AttemptEnd(End.OK)),
        ({"snooze": 2.5}, 3, False, AttemptEnd(End.SNOOZE, 2.5, 1_700_000_003)),
        ({"type": "E", "retry_in": 4}, 1, False, AttemptEnd(End.RETRY, 4.0, 1_700_000_005)),
        ({"type": "E", "retry_in": 4}, 1, True, AttemptEnd(End.RETRY, 0.0, 0)),
        ({"type": "E", "retry_in": 0}, 1, False, AttemptEnd(End.RETRY, 0.0, 0)),
        ({"type": "E", "final": True}, 1, False, AttemptEnd(End.FAIL)),
        ({"type": "E"}, 3, False, AttemptEnd(End.FAIL)),
    ],
    ids=["ok", "snooze", "asked delay", "at once", "zero delay", "final", "attempts used up"],
)
def test_an_attempt_ends_ok_snoozed_retried_or_failed(error, attempt, retry_now, expected):
    assert planner.attempt_end(error, attempt, 3, (1.0, 60.0), WALL + 0.5, retry_now) == expected


def test_a_retry_without_asked_delay_backs_off_with_jitter():
    end = planner.attempt_end({"type": "E"}, 3, 5, (1.0, 60.0), WALL, rng=random.Random(7))
    expected = planner.retry_delay(3, 1.0, 60.0, random.Random(7))
    assert end.kind is End.RETRY
    assert 2.0 <= end.delay < 4.0 and end.delay == expected
    assert end.retry_at == math.ceil(WALL + expected)


# ---------------------------------------------------------------- prefetch and leases
@pytest.mark.parametrize(
    "previous, seconds, expected",
    [(None, 0.4, 0.4), (1.0, 0.0, 0.8), (0.5, 1.0, 0.6)],
)
def test_the_run_mean_moves_a_fifth_of_the_way(previous, seconds, expected):
    assert planner.run_mean(previous, seconds) == pytest.approx(expected)


@pytest.mark.parametrize(
    "timeouts, expected",
    [([], 5.0), ([60.0], 5.0), ([8.0, 60.0], 2.0), ([0.04], 0.05)],
)
def test_leases_are_renewed_four_times_a_type_timeout_within_bounds(timeouts, expected):
    assert planner.renew_interval(timeouts) == expected


@pytest.mark.parametrize(
    "interval, failed, expected",
    [(2.0, False, 2.0), (2.0, True, planner.STEP_RETRY), (0.1, True, 0.1)],
)
def test_a_renewal_is_due_an_interval_after_the_last_or_sooner_after_an_error(interval, failed, expected):
    assert planner.renew_delay(interval, failed) == expected


def test_the_planner_imports_no_actor_system():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, actors.workers.planner; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('thespian', 'supervision', 'fdblayer')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_claimed_jobs_go_back_only_as_a_real_backlog_and_not_too_often():
    """``planner.to_trim``: a mix of quick and slow handlers moves the
    measured run time up and down; putting jobs back and claiming them
    again at each move cost a store write a job (a review measured about
    two releases a job in such a drain)."""
    assert planner.to_trim(20, 2, 0.1, 10.0) == 20, "2 s of work held: all of it back"
    assert planner.to_trim(20, 2, 0.04, 10.0) == 0, "0.8 s of work: kept"
    assert planner.to_trim(2, 2, 5.0, 10.0) == 0, "one a worker is kept"
    assert planner.to_trim(20, 2, 0.1, planner.TRIM_EVERY - 0.1) == 0, "not again so soon"
    assert planner.to_trim(20, 2, None, 10.0) == 0, "nothing measured yet"
