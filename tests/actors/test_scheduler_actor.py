"""The scheduler on a real node: real job actor processes, SIGKILL, a manual clock.

One node per test (the scheduler tree on a manual clock, so backoff and
the interval timer are driven by ``advance_clock``, never by sleeping);
each test checks that no process of the node outlives ``node.stop()``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

import pytest

from actors.settings.config import CONFIG_SERVER, Config, GetConfig
from actors.settings.keeper import config_children
from actors.scheduler.client import SchedulerClient
from actors.scheduler.core import InvalidSetting, JobNotFound
from actors.scheduler.sup import SCHEDULER_NAME, SCHEDULER_SUP_NAME, scheduler_children
from supervision import start_node
from supervision.testing import running_node
from tests.procs import free_port, group_pids, pid_alive, wait_until

FIX = "tests.actors.scheduler_fixtures"
pytestmark = pytest.mark.timeout(120)


class Harness:
    def __init__(self, node, tmp_path: Path) -> None:
        self.node = node
        self.client = node.client()
        self.s = SchedulerClient(self.client)
        self.log = tmp_path / "events.log"

    def spec(
        self,
        job_id: str,
        handler: str = "forever",
        continuous: bool = True,
        permanent: bool = True,
        isolation: str = "thread",
        **options,
    ) -> dict:
        spec = {
            "id": job_id,
            "handler": f"{FIX}:{handler}",
            "continuous": continuous,
            "options": dict(options, log=str(self.log)),
            "isolation": isolation,
        }
        if permanent:
            spec["db_name"] = "db1"
        return spec

    def advance(self, seconds: float) -> None:
        self.client.advance_clock(SCHEDULER_NAME, seconds)

    def running(self) -> list:
        """Ids of jobs whose actor is up (not merely starting)."""
        return sorted(j["id"] for j in self.s.jobs() if j["pid"] not in (None, "<starting>"))

    def job_pid(self, job_id: str) -> int:
        addr = wait_until(lambda: self.s.job_address(job_id), what=f"{job_id} running")
        return self.client.get_pid(addr)

    def live_job_actors(self) -> int:
        """Jobs whose code runs: job processes, and job threads of the hosts."""
        return self.s.live_jobs()

    def events(self, kind: str | None = None) -> list[str]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        return [line for line in lines if kind is None or line.startswith(kind + " ")]


@contextlib.contextmanager
def scheduler_node(tmp_path: Path, max_jobs: int):
    """A node running the scheduler tree (manual clock) at ``max_jobs``; at
    the end every process of it must be gone."""
    config = Config()
    config.set("replicator", "max_jobs", max_jobs)
    node = start_node(free_port(), None, scheduler_children(config, clock="manual"))
    try:
        yield Harness(node, tmp_path)
    finally:
        pgid = node.pgid
        node.stop()
        wait_until(lambda: not group_pids(pgid), 20, "no process of the node left")


@pytest.fixture
def h(tmp_path):
    with scheduler_node(tmp_path, 10) as harness:
        yield harness


# ------------------------------------------------- the seed's reschedule cases


def continuous(i: int) -> dict:
    return {"id": str(i), "continuous": True, "history": [("stopped", i + 1), ("started", i), ("added", 0)]}


def continuous_running(i: int) -> dict:
    return {"id": str(i), "continuous": True, "running": True, "history": [("started", i), ("added", 0)]}


def oneshot(i: int) -> dict:
    return dict(continuous(i), continuous=False)


def oneshot_running(i: int) -> dict:
    return dict(continuous_running(i), continuous=False)


#: (case, jobs, [(max_jobs, max_churn, expected running ids)...]) from the seed's scheduler_test_.
RESCHEDULE_CASES = [
    ("one_job_starts", [oneshot(1)], [(500, 20, [1])]),
    ("no_jobs_start_if_max_is_0", [oneshot(1)], [(0, 20, [])]),
    ("one_job_starts_if_max_is_1", [oneshot(1), oneshot(2)], [(1, 20, [1])]),
    ("max_churn_does_not_throttle_initial_start", [oneshot(1), oneshot(2)], [(500, 1, [1, 2])]),
    ("excess_oneshot_only_jobs", [oneshot_running(1), oneshot_running(2)], [(1, 20, [2]), (0, 20, [])]),
    ("excess_continuous_only_jobs", [continuous_running(1), continuous_running(2)], [(1, 20, [2]), (0, 20, [])]),
    (
        "excess_prefer_continuous_first",
        [continuous_running(1), oneshot_running(2), continuous_running(3)],
        [(2, 20, [2, 3]), (1, 20, [2]), (0, 20, [])],
    ),
    (
        "stop_oldest_first",
        [continuous_running(7), continuous_running(4), continuous_running(5)],
        [(2, 20, [5, 7]), (1, 20, [7])],
    ),
    ("start_oldest_first", [continuous(7), continuous(2), continuous(5)], [(1, 20, [2]), (2, 20, [2, 5])]),
    ("dont_stop_if_nothing_pending", [continuous_running(1), continuous_running(2)], [(2, 20, [1, 2])]),
    (
        "max_churn_limits_number_of_rotated_jobs",
        [continuous(1), continuous_running(2), continuous(3), continuous_running(4)],
        [(2, 1, [1, 4])],
    ),
    (
        "if_pending_less_than_running_start_all_pending",
        [continuous(1), continuous_running(2), continuous(3), continuous_running(4), continuous_running(5)],
        [(3, 20, [1, 2, 5])],
    ),
    (
        "running_less_than_pending_swap_all_running",
        [continuous(1), continuous(2), continuous(3), continuous_running(4), continuous_running(5)],
        [(2, 20, [1, 2])],
    ),
    ("oneshot_dont_get_rotated", [oneshot_running(1), continuous(2)], [(1, 20, [1])]),
    ("rotate_continuous_only_if_mixed", [continuous(1), oneshot_running(2), continuous_running(3)], [(2, 20, [1, 2])]),
    ("oneshot_dont_get_starting_priority", [continuous(1), oneshot(2), continuous_running(3)], [(1, 20, [1])]),
    (
        "oneshot_will_hog_the_scheduler",
        [oneshot_running(1), oneshot_running(2), oneshot(3), continuous(4)],
        [(2, 20, [1, 2])],
    ),
    (
        "if_excess_is_trimmed_rotation_doesnt_happen",
        [continuous(1), continuous_running(2), continuous_running(3)],
        [(1, 20, [3])],
    ),
]


@pytest.mark.slow
def test_seed_reschedule_cases_through_the_real_actor(h) -> None:
    """Every reschedule case of the seed, with real job actors started and stopped."""
    for name, jobs, steps in RESCHEDULE_CASES:
        rows = [
            {
                "spec": h.spec(j["id"], continuous=j["continuous"]),
                "running": j.get("running", False),
                "history": [(t, w, None) for t, w in j["history"]],
            }
            for j in jobs
        ]
        h.s.set_setting("max_jobs", 500)
        h.s.load_jobs(rows)
        want_up = sorted(j["id"] for j in jobs if j.get("running"))
        wait_until(lambda: h.running() == want_up, what=f"{name}: initial jobs up")
        for max_jobs, max_churn, expected in steps:
            h.s.set_setting("max_jobs", max_jobs)
            h.s.set_setting("max_churn", max_churn)
            h.s.reschedule()
            want = sorted(str(i) for i in expected)
            wait_until(
                lambda: h.running() == want and h.live_job_actors() == len(want),
                what=f"{name}: running {want} at max_jobs={max_jobs}",
            )
    h.s.load_jobs([])
    wait_until(lambda: h.live_job_actors() == 0, what="all job actors stopped")


def test_if_transient_job_crashes_it_gets_removed(h) -> None:
    h.s.add_job(h.spec("t1", handler="crash", permanent=False))
    wait_until(lambda: h.s.jobs() == [], what="transient job removed")
    assert h.s.stats()["adds"] == 1


def test_if_permanent_job_crashes_it_stays_in_ets(h) -> None:
    h.s.add_job(h.spec("p1", handler="crash"))
    summary = wait_until(lambda: (s := h.s.job_summary("p1")) and s["state"] == "crashing" and s, what="crash recorded")
    assert summary["error_count"] == 1 and summary["info"] == "RuntimeError: boom on purpose"
    history = h.s.job("p1")["history"]
    assert history[0]["type"] == "crashed" and history[0]["reason"] == "RuntimeError: boom on purpose"
    assert h.s.stats()["crashes"] == 1


# ------------------------------------------------------------ crashes, backoff


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_sigkilled_job_is_a_crash_and_backs_off_on_the_clock(h, isolation) -> None:
    """SIGKILL of the job's process: its own, or the job host it runs in."""
    h.s.add_job(h.spec("k1", isolation=isolation))
    pid = h.job_pid("k1")
    os.kill(pid, signal.SIGKILL)
    summary = wait_until(
        lambda: (s := h.s.job_summary("k1")) and s["state"] == "crashing" and s, what="SIGKILL seen as a crash"
    )
    assert summary["info"] == "killed" and summary["error_count"] == 1
    h.advance(29)
    h.s.reschedule()
    assert h.s.job_summary("k1")["state"] == "crashing"  # still backing off (30 s for one crash)
    h.advance(1)
    h.s.reschedule()
    new_pid = h.job_pid("k1")
    assert new_pid != pid and pid_alive(new_pid)
    # A second crash right after: the backoff doubles to 60 s.
    os.kill(new_pid, signal.SIGKILL)
    wait_until(lambda: h.s.job_summary("k1")["error_count"] == 2, what="second crash")
    h.advance(59)
    h.s.reschedule()
    assert h.s.job_summary("k1")["state"] == "crashing"
    h.advance(1)
    h.s.reschedule()
    wait_until(lambda: h.running() == ["k1"], what="restart after 60 s")
    assert h.s.stats()["crashes"] == 2


def test_one_shot_job_that_completes_leaves_the_table(h, tmp_path) -> None:
    flag = tmp_path / "go"
    h.s.add_job(h.spec("o1", handler="until_file", continuous=False, path=str(flag)))
    wait_until(lambda: h.running() == ["o1"], what="one-shot running")
    flag.touch()
    wait_until(lambda: h.s.jobs() == [], what="completed job removed")
    assert h.live_job_actors() == 0
    assert [line.split()[0] for line in h.events()] == ["start", "done"]


@pytest.mark.slow
def test_stopped_job_checkpoints_and_resumes_from_it(h) -> None:
    h.s.add_job(h.spec("c1"))
    wait_until(lambda: h.s.job("c1")["info"].get("ticks", 0) >= 3, what="ticks")
    h.s.set_setting("max_jobs", 0)
    h.s.reschedule()
    wait_until(lambda: h.live_job_actors() == 0, what="job stopped")
    stopped_at = h.s.job("c1")["info"]["ticks"]
    assert h.events("stop"), "the handler saw the stop"
    h.s.set_setting("max_jobs", 1)
    h.s.reschedule()
    wait_until(lambda: h.s.job("c1")["info"].get("ticks", 0) > stopped_at, what="ticks resumed")
    assert len(h.events("start")) == 2


def test_interval_timer_rotates_continuous_jobs(h) -> None:
    h.s.set_setting("max_jobs", 1)
    h.s.set_setting("interval", 10_000)
    h.s.add_job(h.spec("r1"))  # fits in max_jobs: started at once
    h.s.add_job(h.spec("r2"))  # waits for a slot
    first = wait_until(lambda: h.running() if len(h.running()) == 1 else None, what="one running")
    h.advance(10)  # the interval timer fires: r2 gets r1's slot
    other = [j for j in ("r1", "r2") if j not in first]
    wait_until(lambda: h.running() == other, what="rotation on the timer")
    assert h.s.stats()["stops"] == 1


def test_remove_job_stops_its_actor_and_add_replaces(h) -> None:
    h.s.add_job(h.spec("x", isolation="process"))
    pid = h.job_pid("x")
    h.s.add_job(h.spec("x", isolation="process"))
    wait_until(lambda: not pid_alive(pid), what="old instance stopped")
    new_pid = h.job_pid("x")
    assert new_pid != pid
    assert h.s.remove_job("x") is True
    wait_until(lambda: not pid_alive(new_pid) and h.live_job_actors() == 0, what="removed job stopped")
    with pytest.raises(JobNotFound):
        h.s.job("x")


def test_remove_and_replace_a_hosted_job_end_its_thread(h) -> None:
    h.s.add_job(h.spec("x"))
    wait_until(lambda: h.running() == ["x"] and h.live_job_actors() == 1, what="x running in a host")
    h.s.add_job(h.spec("x"))  # replaces: the old run stops, a new one starts
    wait_until(lambda: len(h.events("stop")) == 1 and h.live_job_actors() == 1, what="old run stopped")
    assert len(h.events("start")) == 2
    assert h.s.remove_job("x") is True
    wait_until(lambda: h.live_job_actors() == 0, what="removed job's code no longer runs")
    with pytest.raises(JobNotFound):
        h.s.job("x")


def test_settings_change_at_run_time(h) -> None:
    """Bad values: tests/hostile/test_scheduler_client.py."""
    assert h.s.set_setting("max_churn", 5) == 5
    assert h.s.set_setting("max_history", "7") == 7
    assert h.s.settings()["max_churn"] == 5 and h.s.settings()["max_history"] == 7
    assert h.s.health_threshold() == 120


# ------------------------------------------------------------ restarts


def test_scheduler_restart_adopts_running_jobs(h) -> None:
    for name in ("a1", "a2"):
        h.s.add_job(h.spec(name))
    pids = {name: h.job_pid(name) for name in ("a1", "a2")}
    old_scheduler = h.client.get_pid(SCHEDULER_NAME)
    os.kill(old_scheduler, signal.SIGKILL)
    wait_until(
        lambda: (p := _try(lambda: h.client.get_pid(SCHEDULER_NAME))) and p != old_scheduler, what="scheduler restarted"
    )
    wait_until(lambda: h.running() == ["a1", "a2"], what="jobs adopted")
    assert {name: h.job_pid(name) for name in ("a1", "a2")} == pids
    h.s.add_job(h.spec("a1"))  # re-added after the restart: kept, not started twice
    h.s.reschedule()
    assert h.job_pid("a1") == pids["a1"]
    assert len(h.events("start")) == 2
    # The adopted job still reports to the new scheduler and still crashes into it.
    os.kill(pids["a2"], signal.SIGKILL)
    wait_until(lambda: h.s.job_summary("a2")["state"] == "crashing", what="adopted job's crash seen")


def _try(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - the scheduler may be restarting
        return None


def test_scheduler_sup_crash_restarts_the_scheduler_too(h) -> None:
    """rest_for_one: jobs and the table that describes them go together."""
    h.s.add_job(h.spec("s1"))
    job_pid = h.job_pid("s1")
    sup_pid = h.client.get_pid(SCHEDULER_SUP_NAME)
    scheduler_pid = h.client.get_pid(SCHEDULER_NAME)
    os.kill(sup_pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(job_pid), what="the job died with its supervisor")
    wait_until(
        lambda: (p := _try(lambda: h.client.get_pid(SCHEDULER_NAME))) and p != scheduler_pid,
        what="scheduler restarted after scheduler_sup",
    )
    assert _try(lambda: h.client.get_pid(SCHEDULER_SUP_NAME)) not in (None, sup_pid)
    assert h.s.jobs() == []


def test_settings_set_through_the_keeper_survive_a_scheduler_restart(tmp_path) -> None:
    """With the node's settings keeper in the tree, SetSetting goes through it
    (running node only: the config file, if any, is left alone), so a SIGKILLed
    scheduler comes back with the changed values, not with its start args."""
    config = Config()
    config.set("replicator", "max_jobs", 10)
    specs = config_children(config) + scheduler_children(config, clock="manual")
    with running_node(specs, level=logging.CRITICAL) as node:  # the kit: it also fails on a leaked process
        h = Harness(node.node, tmp_path)
        assert h.s.set_setting("max_jobs", "1") == 1
        assert h.s.set_setting("interval", 5000) == 5000
        with pytest.raises(InvalidSetting):
            h.s.set_setting("interval", 2**32)  # beyond any timer: refused before it reaches the keeper
        assert h.client.call(CONFIG_SERVER, GetConfig("replicator"))[1]["max_jobs"] == 1
        h.s.add_job(h.spec("k1"))  # fits in max_jobs: started at once
        h.s.add_job(h.spec("k2"))  # waits for a slot
        wait_until(lambda: h.running() == ["k1"], what="one job running (max_jobs = 1)")
        old = node.kill(SCHEDULER_NAME)
        node.wait_restarted(SCHEDULER_NAME, old, timeout=10)
        settings = wait_until(lambda: _try(h.s.settings), what="the new scheduler answering")
        assert (settings["max_jobs"], settings["interval"]) == (1, 5000)
        wait_until(lambda: h.running() == ["k1"], what="k1 adopted")
        h.s.add_job(h.spec("k3"))  # the start-time max_jobs (10) would start it at once
        stats = h.s.stats()
        assert (stats["running"], stats["pending"]) == (1, 1) and h.live_job_actors() == 1
        exits = [e for e in node.events() if e["event"] == "child_exited" and e["child"] == "scheduler"]
        assert [e["reason"] for e in exits] == ["killed"], "the supervisor saw the SIGKILL"
