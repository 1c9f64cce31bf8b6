"""Document jobs and the node's lease fence in the scheduler: while the
fence has run out no document job starts, by any path (a reschedule, a
rotation, a job waiting for its old run to end, a queued process start),
other jobs take the free slots, and a job fenced out runs again as soon as
the fence holds. On plain data: the core with a fake runner, and the real
Runners with a stub scheduler (no actors)."""

from __future__ import annotations


from actors.scheduler.core import (
    LEASE_EXPIRED,
    Event,
    EventType,
    JobRow,
    JobSpec,
    JobTable,
    Scheduling,
    Settings,
)
from actors.scheduler.host import StartHosted
from actors.scheduler.runners import Runners, Starting, Waiting

from .test_scheduler_core import NOW, FakeClock, FakeRunner


def doc(job_id: str) -> JobSpec:
    return JobSpec(job_id, handler="m:f", continuous=True, db_name="_replicator", doc_id=job_id)


def plain(job_id: str) -> JobSpec:
    return JobSpec(job_id, handler="m:f", continuous=True)  # no document: no lease, never fenced


def running(s: Scheduling) -> list:
    return sorted(j.id for j in s.table if j.pid is not None)


# ------------------------------------------------------------------ core


def test_a_job_without_a_document_starts_while_document_jobs_wait_for_the_fence() -> None:
    """The commit's own test says "other jobs start" while the fence has run
    out; but pending_jobs(count) hands start_jobs the `count` oldest idle
    jobs, and the guard skips the document ones without picking others: with
    one free slot and a waiting document job ahead of it in the order, a
    plain job never starts for as long as the fence is out."""
    s = Scheduling(FakeRunner(), FakeClock(), Settings(max_jobs=1), fenced=lambda: True)
    s.add_job(doc("a-doc"))
    s.add_job(plain("z-plain"))  # 2 jobs > max_jobs: left to the reschedule
    for _ in range(3):
        s.reschedule()
    assert running(s) == ["z-plain"], "the only slot stays empty while the fence is out"


def test_a_rotation_while_fenced_does_not_stop_jobs_it_cannot_replace() -> None:
    """All slots run (continuous jobs without a document) and document jobs
    wait for the fence: rotate_jobs stops max_churn running jobs to make room
    for pending ones, then the guard refuses to start the document jobs it
    picked: the running jobs were stopped for nothing and the slots stay
    empty (and, as above, are not refilled while the fence is out)."""
    table = JobTable()
    for i, name in enumerate(("p1", "p2")):
        started = [Event(EventType.STARTED, NOW - 100 + i), Event(EventType.ADDED, NOW - 200)]
        table.put(JobRow(name, plain(name), started, pid=f"<0.{i}.0>"))
    for name in ("d1", "d2"):
        table.put(JobRow(name, doc(name), [Event(EventType.ADDED, NOW - 50)]))
    runner = FakeRunner()
    s = Scheduling(runner, FakeClock(), Settings(max_jobs=2, max_churn=20), table, fenced=lambda: True)
    s.reschedule()
    assert runner.stopped == [], f"stopped {runner.stopped} to start jobs the guard then refused"
    assert running(s) == ["p1", "p2"]


def test_a_lease_expired_exit_read_after_the_fence_holds_again_runs_again_without_waiting_an_interval() -> None:
    """The sequence 91c1ac9 describes: the fence lapses, a document job sees
    it and returns, the doc processor renews (the fence holds again) and
    sends Reschedule, and only then is the job's exit (now lease_expired,
    thanks to the latch) read. The Reschedule found the job still running;
    the exit leaves it pending, and nothing starts it until the scheduler's
    periodic reschedule (interval, 60 s by default): a continuous document
    does not run for up to a minute although its fence holds."""
    fence = {"expired": False}
    s = Scheduling(FakeRunner(), FakeClock(), Settings(max_jobs=10), fenced=lambda: fence["expired"])
    s.add_job(doc("d"))
    assert running(s) == ["d"]
    fence["expired"] = True  # the handler sees it and returns (its exit not read yet)
    fence["expired"] = False  # the processor renews: the fence holds again ...
    s.reschedule()  # ... and it asks for a reschedule (_move_fence): d still looks running
    s.job_exited(s.table.get("d"), LEASE_EXPIRED)  # then the exit is read
    assert running(s) == ["d"], "pending until the next periodic reschedule (60 s)"


# ------------------------------------------------------------ the runners


class StubScheduler:
    """What Runners/ActorRunner/HostRunner use of the Scheduler actor."""

    def __init__(self) -> None:
        self.myAddress = "sched"
        self.sup = "sup"
        self.fence_path = None
        self.calls: list = []
        self.sent: list = []
        self.fence = {"expired": False}
        self.runners = Runners(self, ["host0"])
        self.runners.hosts.addrs = ["host0"]
        self.core = Scheduling(self.runners, FakeClock(), Settings(max_jobs=10), fenced=lambda: self.fence["expired"])

    def call_async(self, to, msg, callback, timeout) -> None:
        self.calls.append((to, msg, callback))

    def send(self, to, msg) -> None:
        self.sent.append((to, msg))

    def demonitor(self, ref) -> None:
        pass

    def job_start_answered(self, token, addr, error) -> None:
        pass

    def started_hosted(self) -> list:
        return [m.spec["id"] for _, m, _ in self.calls if isinstance(m, StartHosted)]

    def start_children(self) -> list:
        return [m for _, m, _ in self.calls if type(m).__name__ == "StartChild"]


def test_a_document_job_waiting_for_its_old_run_does_not_start_past_the_fence() -> None:
    """A document job re-added (or rotated back in) while its previous run
    still ends gets a Waiting pid; Runners.ended starts it when that run ends
    through the runner directly, not through Scheduling.start_job: the guard
    is skipped, and a run starts although the fence has run out."""
    s = StubScheduler()
    s.core.add_job(doc("d"))
    old = s.core.table.get("d")
    s.core.add_job(doc("d"))  # the processor adds it again: the old run is told to stop
    assert isinstance(s.core.table.get("d").pid, Waiting)
    s.fence["expired"] = True
    s.calls.clear()
    s.runners.ended(old.monitor)  # the old run's JobExited
    assert s.started_hosted() == [], "a document job started while the node's fence had run out"


def test_a_queued_process_job_start_is_not_sent_once_the_fence_has_run_out() -> None:
    """Process-isolation jobs start through ActorRunner's queue, at most
    MAX_STARTS_IN_FLIGHT StartChild calls at once; the guard runs when a job
    is queued, not when its start is sent: a queue of document jobs built
    while the fence held is still started, one process each, after it ran
    out (each returning lease_expired at once: the churn the commit meant to
    stop, in its costliest form)."""
    s = StubScheduler()
    for i in range(6):
        s.core.add_job(JobSpec(f"d{i}", handler="m:f", continuous=True, db_name="db", isolation="process"))
    s.runners.pump()
    assert len(s.start_children()) == 4  # MAX_STARTS_IN_FLIGHT, two queued
    s.fence["expired"] = True
    s.runners.actors.answered()  # one start answered: the queue moves on
    assert len(s.start_children()) == 4, "a queued document job's process started past the fence"
    queued = [j for j in s.core.table if isinstance(j.pid, Starting) and not isinstance(j.pid, Waiting)]
    assert queued, "sanity"
