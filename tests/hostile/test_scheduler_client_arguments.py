"""Hostile arguments to the scheduler's calls: answered with a named error, never a crash.

One node per module (``n``); each test checks that the scheduler answers
with its named error (or False/None where the call answers so) and is not
restarted (its pid stays the same), so the settings changed at run time and
the node's restart intensity are kept. ``Scheduler`` (actors/scheduler.py)
checks a call's arguments before anything changes:

* a job id that is not a str (even an unhashable one) in ``RemoveJob``/
  ``GetJob``/``JobSummary``/``JobAddress`` is a job that is not there
  (False, ``JobNotFound``, None, None); an unhashable key in ``SetSetting``
  is an ``InvalidSetting``;
* ``JobsPage`` with a limit/skip that is not an int >= 0, ``JobStates``
  with anything but a list of at most 10,000 str ids, are an
  ``InvalidArgument``;
* ``SetSetting("interval", v)`` with ``v`` beyond a timer's range is an
  ``InvalidSetting``;
* ``AddJob`` with a ``start_time`` no clock can show (NaN, infinite, out of
  years 1 to 9999) is an ``InvalidJobSpec``: no such job is ever in the
  table, so every listing keeps working;
* ``LoadJobs`` with one bad row is refused and leaves the table as it was.
"""

from __future__ import annotations

import math

import pytest
from supervision.exceptions import CallFailed

from actors.scheduler.protocol import AddJob
from actors.scheduler.core import InvalidRequest, InvalidJobSpec, InvalidSetting, JobNotFound, SchedulerError

from tests.procs import wait_until

from .http import request
from .node import IDLE

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def judged_alone(n):
    """Each case starts with a live scheduler as its baseline (so a crash fails one case, not the next)."""
    n.scheduler = wait_until(n.scheduler_pid, 15, "the scheduler back", ignore=(Exception,))
    yield
    n.scheduler = wait_until(n.scheduler_pid, 15, "the scheduler back", ignore=(Exception,))
    wait_until(lambda: n.undo() or True, 15, "the scheduler's table and settings put back", ignore=(Exception,))


def answered(n, call, allowed=(SchedulerError,)):
    """Run ``call``: it returns or raises one of ``allowed``; the scheduler did not crash."""
    try:
        result = call()
    except allowed as exc:
        result = exc
    except CallFailed as exc:
        pytest.fail(f"the scheduler crashed: {exc}")
    assert n.scheduler_pid() == n.scheduler, "the scheduler was restarted"
    return result


@pytest.mark.parametrize("job_id", [[1], {"a": 1}, {1, 2}, bytearray(b"x")], ids=repr)
def test_unhashable_job_ids_are_jobs_not_there(n, job_id) -> None:
    assert answered(n, lambda: n.s.remove_job(job_id)) is False
    assert isinstance(answered(n, lambda: n.s.job(job_id)), JobNotFound)
    assert answered(n, lambda: n.s.job_summary(job_id)) is None
    assert answered(n, lambda: n.s.job_address(job_id)) is None


@pytest.mark.parametrize(
    "job_ids", ["abc", None, [["x"]], [1], [{"a": 1}], ["ok"] * 10_001], ids=lambda v: repr(v)[:20]
)
def test_bad_job_state_lists_are_invalid_arguments(n, job_ids) -> None:
    assert isinstance(answered(n, lambda: n.s.job_states(job_ids)), InvalidRequest)


def test_job_states_answer_each_id_in_one_call(n) -> None:
    n.s.add_job({"id": "here", "handler": IDLE})
    states = answered(n, lambda: n.s.job_states(["here", "gone"]))
    assert set(states) == {"here", "gone"} and states["gone"] is None
    summary, stats = states["here"]
    assert summary == n.s.job_summary("here") and isinstance(stats, dict)


@pytest.mark.parametrize("key", [["max_jobs"], {"k": 1}], ids=repr)
def test_an_unhashable_setting_key_is_an_invalid_setting(n, key) -> None:
    assert isinstance(answered(n, lambda: n.s.set_setting(key, 1)), InvalidSetting)


@pytest.mark.parametrize(
    "limit, skip", [(-1, "x"), (None, None), ("10", 0), (1.5, 0), (0, [1]), (True, 0), (1, -1)], ids=repr
)
def test_a_bad_page_is_an_invalid_argument(n, limit, skip) -> None:
    assert isinstance(answered(n, lambda: n.s.jobs_page(limit, skip)), InvalidRequest)


@pytest.mark.parametrize(
    "extra",
    [{"again": "yes"}, {"again": True, "added_at": "now"}, {"added_at": math.nan}, {"crashes": -1}, {"crashes": 1.5}],
    ids=repr,
)
def test_bad_add_job_arguments_are_invalid_and_add_nothing(n, extra) -> None:
    """AddJob's arguments beside the spec (a restarted scheduler's re-add):
    a bad one is an InvalidRequest, the scheduler does not crash and adds
    nothing."""
    msg = AddJob({"id": "bad-extra", "handler": IDLE}, **extra)
    assert isinstance(answered(n, lambda: n.s.call(msg)), InvalidRequest)
    assert "bad-extra" not in [j["id"] for j in n.s.jobs()]


@pytest.mark.parametrize("value", [86_400_000_000_000_001, 10**30, str(10**20), 2**32], ids=repr)
def test_an_interval_beyond_any_timer_is_an_invalid_setting(n, value) -> None:
    assert isinstance(answered(n, lambda: n.s.set_setting("interval", value)), InvalidSetting)
    assert n.s.settings() == n.settings


@pytest.mark.parametrize("start_time", [math.nan, math.inf, -math.inf, 1e300, -1e300, 2**70, 253402300800], ids=repr)
def test_a_start_time_no_clock_can_show_is_an_invalid_job_spec(n, start_time) -> None:
    spec = {"id": "when", "handler": IDLE, "start_time": start_time}
    assert isinstance(answered(n, lambda: n.s.add_job(spec)), InvalidJobSpec)
    assert answered(n, lambda: n.s.jobs()) == []
    reply = request(n.http_port, "GET", "/_scheduler/jobs")
    assert reply.status == 200 and reply.json()["jobs"] == [], reply


@pytest.mark.parametrize(
    "bad",
    [
        "not a row",
        {"spec": {"id": "b", "handler": IDLE}},
        {"spec": {"id": "b", "handler": IDLE}, "history": [("exploded", 0.0, None)]},
        {"spec": {"id": "b", "handler": IDLE}, "history": [("added", math.nan, None)]},
        {"spec": {"id": "b", "handler": IDLE}, "history": [("added",)]},
        {"spec": {"id": ""}, "history": []},
    ],
    ids=repr,
)
def test_a_bad_row_loads_nothing(n, bad) -> None:
    n.s.add_job({"id": "kept", "handler": IDLE})
    before = n.s.jobs()
    rows = [{"spec": {"id": "a", "handler": IDLE}, "history": [("added", 1.0, None)]}, bad]
    assert isinstance(answered(n, lambda: n.s.load_jobs(rows)), (InvalidRequest, InvalidJobSpec))
    assert n.s.jobs() == before


@pytest.mark.parametrize("job_ids", ["abc", None, [["x"]], [1], ["ok"] * 10_001], ids=lambda v: repr(v)[:20])
def test_bad_removal_lists_are_invalid_requests(n, job_ids) -> None:
    assert isinstance(answered(n, lambda: n.s.remove_jobs(job_ids)), InvalidRequest)


def test_remove_jobs_removes_each_in_one_call(n) -> None:
    n.s.add_job({"id": "r1", "handler": IDLE})
    n.s.add_job({"id": "r2", "handler": IDLE})
    assert answered(n, lambda: n.s.remove_jobs(["r1", "r2", "gone"])) == 2
    assert n.s.job_summary("r1") is None and n.s.job_summary("r2") is None
