"""Scheduler jobs run as threads of a few job hosts (isolation "thread", the default).

Each job is still its own supervised entity: it ends with its own reason,
stops run in parallel and never hold up a start, and a job is reported gone
only once its code no longer runs, even when its handler ignores stop.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from actors import names
from actors.scheduler.host import KILL_GRACE, STOP_GRACE, StartHosted
from actors.scheduler.model import InvalidJobSpec
from supervision.registry import pid_alive
from tests.actors.test_scheduler_actor import _try, scheduler_node
from tests.procs import wait_until


@pytest.fixture
def h(tmp_path):
    with scheduler_node(tmp_path, 100) as harness:
        yield harness


def host_pids(h) -> set[int]:
    return {c.pid for c in h.client.which_children(names.SCHEDULER_HOSTS_SUP)}


def test_many_jobs_share_a_few_processes(h):
    for i in range(40):
        h.s.add_job(h.spec(f"j{i}"))
    wait_until(lambda: len(h.running()) == 40 and h.live_job_actors() == 40, what="40 jobs running")
    pids = {int(line.split()[2]) for line in h.events("start")}
    assert pids <= host_pids(h) and len(pids) == 4, "spread over the 4 hosts, no process per job"
    assert h.client.which_children(names.SCHEDULER_SUP) == []


@pytest.mark.slow
def test_stubborn_handlers_stop_in_parallel_and_a_new_job_starts_meanwhile(h):
    for i in range(20):
        h.s.add_job(h.spec(f"s{i}", handler="stubborn"))
    wait_until(lambda: len(h.events("start")) == 20, what="20 stubborn jobs running")
    t0 = time.monotonic()
    for i in range(20):
        h.s.remove_job(f"s{i}")
    h.s.add_job(h.spec("fresh"))
    wait_until(
        lambda: "fresh" in h.running() and any(" fresh " in line for line in h.events("start")),
        what="a new job started while the others stop",
    )
    assert time.monotonic() - t0 < 2.0, "the start did not wait behind the stops"
    wait_until(
        lambda: len(h.events("end")) == 20 and h.live_job_actors() == 1,
        STOP_GRACE + KILL_GRACE + 5,
        what="every stubborn job's code ended",
    )
    assert time.monotonic() - t0 < STOP_GRACE + KILL_GRACE + 3, "in parallel: one grace for all 20"


@pytest.mark.slow
def test_a_handler_blocked_in_native_code_takes_its_host_down_and_nothing_else_is_lost(h):
    h.s.add_job(h.spec("blocked", handler="blocked"))
    wait_until(lambda: h.events("start"), what="the blocked job running")
    host = int(h.events("start")[0].split()[2])
    h.s.remove_job("blocked")
    wait_until(lambda: not pid_alive(host), STOP_GRACE + KILL_GRACE + 5, what="its host exited")
    wait_until(lambda: len(host_pids(h)) == 4 and host not in host_pids(h), what="the host restarted")
    assert h.live_job_actors() == 0
    h.s.add_job(h.spec("after"))
    wait_until(lambda: h.running() == ["after"] and h.live_job_actors() == 1, what="jobs run again")


def test_a_job_ends_with_its_own_reason_and_a_sigkilled_host_ends_only_its_own_jobs(h):
    h.s.add_job(h.spec("c1", handler="crash"))
    summary = wait_until(lambda: (s := h.s.job_summary("c1")) and s["state"] == "crashing" and s, what="crash")
    assert summary["info"] == "RuntimeError: boom on purpose"
    for i in range(8):
        h.s.add_job(h.spec(f"k{i}"))
    wait_until(lambda: len(h.events("start")) == 9, what="8 jobs running")
    by_pid: dict[int, set] = {}
    for line in h.events("start")[1:]:
        _, job, pid = line.split()
        by_pid.setdefault(int(pid), set()).add(job)
    victim, on_victim = next(iter(by_pid.items()))
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: all(h.s.job_summary(j)["state"] == "crashing" for j in on_victim), what="its jobs crashed")
    others = {f"k{i}" for i in range(8)} - on_victim
    assert all(h.s.job_summary(j)["state"] == "running" for j in others), "the other hosts' jobs run on"
    assert {h.s.job_summary(j)["info"] for j in on_victim} == {"killed"}


def test_a_malformed_start_is_refused_and_the_host_runs_on(h):
    host = "scheduler.host.0"
    pid = h.client.get_pid(host)
    with pytest.raises(InvalidJobSpec):
        h.client.call(host, StartHosted("ref", {"id": 5}, None, None))
    assert h.client.get_pid(host) == pid
    h.s.add_job(h.spec("after"))
    wait_until(lambda: h.live_job_actors() == 1, what="the hosts still run jobs")


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_removed_job_is_listed_until_its_code_ended_and_a_job_of_its_id_waits_for_it(h, isolation):
    """Removing only asks a job to stop: the scheduler keeps listing it (and
    counts it as ``ending``) until its code returned, and the same id added
    again meanwhile starts only after that: one node never runs two copies."""
    h.s.add_job(h.spec("L", handler="lingering", isolation=isolation, linger=1.0))
    wait_until(lambda: h.events("start"), what="L running")
    h.s.remove_job("L")
    assert [j["id"] for j in h.s.jobs()] == ["L"] and h.s.stats()["ending"] == 1, "still running its cleanup"
    assert h.s.job("L")["id"] == "L", "what the list shows, the job's own view finds"
    h.s.add_job(h.spec("L", handler="lingering", isolation=isolation, linger=0.0))
    assert h.s.job_summary("L")["state"] == "running", "it holds its slot while it waits"
    wait_until(lambda: len(h.events("start")) == 2 and h.events("end"), 10, what="the old L ended, the new one started")
    first_end = float(h.events("end")[0].split()[1])  # "end <wall time> <job id> <pid>"
    second_start = float(h.events("start")[1].split()[1])
    assert second_start >= first_end, "the new run started before the old one's code ended"
    assert h.s.stats()["ending"] == 0 and [j["id"] for j in h.s.jobs()] == ["L"]
    assert h.live_job_actors() == 1


def test_a_run_still_ending_when_the_scheduler_restarts_is_waited_for(h):
    """A removed job's code still runs (it lingers after its stop) when the
    scheduler actor is SIGKILLed: the restarted scheduler adopts that run as
    ending (listed, counted), and the same id added again starts only once
    it has ended: one node never runs two copies of a job."""
    h.s.add_job(h.spec("L", handler="lingering", linger=3.0))
    wait_until(lambda: h.events("start"), what="L running")
    assert h.s.remove_job("L") is True
    old = h.client.get_pid(names.SCHEDULER)
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: _try(lambda: h.client.get_pid(names.SCHEDULER)) not in (None, old) and _try(h.s.stats), 20)
    assert [j["id"] for j in h.s.jobs()] == ["L"] and h.s.stats()["ending"] == 1, "the ending run was adopted"
    h.s.add_job(h.spec("L", handler="lingering", linger=0.0))
    wait_until(lambda: len(h.events("start")) == 2 and h.events("end"), 20, what="the old L ended, the new one started")
    first_end = float(h.events("end")[0].split()[1])
    second_start = float(h.events("start")[1].split()[1])
    assert second_start >= first_end, f"two copies of L ran at once for {first_end - second_start:.2f} s"


@pytest.mark.slow
def test_a_process_job_holds_none_of_its_siblings_descriptors(h):
    """isolation "process": each job is a forked child of scheduler_sup, and
    the k-th must not inherit the pipes its parent keeps for the k-1 before
    it (descriptors would grow with the square of the jobs)."""
    from tests.procs import open_fds

    for i in range(20):
        h.s.add_job(h.spec(f"p{i}", isolation="process"))
    wait_until(lambda: len(h.running()) == 20, 60, what="20 process jobs running")
    counts = [open_fds([h.job_pid(f"p{i}")]) for i in range(20)]
    # Inheriting them, the 20th held 38 more than the 1st (2 per elder sibling).
    # The parent's own short-lived sockets move one child's count by a few
    # either way (a CI run saw the 1st at 50, the rest at 36-42): what must
    # not happen is the later children holding more than the earlier ones.
    growth = max(counts[10:]) - min(counts[:10])
    assert growth < 10, f"descriptors per job process grow with its siblings: {counts}"
