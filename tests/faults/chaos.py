"""A chaos run: random SIGKILLs while workers use the queue and the scheduler runs jobs.

One real node (the console command) on one SQLite file; ``workers``
queue workers add, accept, update and finish jobs, each keeping a ledger
(:mod:`tests.faults.queue_worker`); the node's scheduler runs
``sched_jobs`` permanent jobs (documents) with ``max_jobs`` slots. Faults,
at random:

* a worker is SIGKILLed (and started again) or paused (SIGSTOP) longer
  than the job type's timeout, so its job is re-enqueued under it;
* one process of the node is SIGKILLed: any supervisor or worker of the
  tree (the jobs server, activity monitors, notifiers, type monitors, the
  scheduler and its job processes, the doc processor, the HTTP listener
  and its process...), sometimes followed within milliseconds by the
  parent of a process the restart just forked (a child caught between its
  fork and its start);
* the whole node goes down: SIGKILL of all its processes, of its node
  supervisor, or of the Thespian admin; then it is started again.

Victims are picked from /proc (Thespian titles each actor process with its
class), so a kill can land while the tree is still restarting from the
previous one. Kills respect the restart intensity of the supervisors that
would count them (a supervisor that gives up is OTP doing its job, not a
fault found): the run counts the restarts its kills cause and those the
node logs (``child_exited`` lines). Now and then after a fault, before
each whole-node fault and at the end, the tree must be whole again:
every child of the fresh node alive and registered under its name, one
activity monitor, notifier and type monitor per job type, no stray
process (an orphan, an unreaped zombie). At the end the ledgers and the
store are checked (:mod:`tests.faults.checks`), then the node stops with
SIGTERM and leaves nothing.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tests.procs import free_port, group_pids, wait_until

from . import checks
from .nodes import INTENSITY, LOG_NAME, CliNode, Proc, Snapshot, describe, proc_tree
from .workers import Workers

JOB_TYPE = "chaos"
HANDLER = "tests.faults.handlers:tracked"
NODE_FAULTS = ("node_kill", "admin_kill", "node_supervisor_kill")
FAST_COUCH_JOBS = {
    "type_check_period_msec": 500,
    "type_check_max_jitter_msec": 100,
    "activity_monitor_max_jitter_msec": 50,
    "type_monitor_holdoff_msec": 50,
}


@dataclass(frozen=True)
class ChaosSettings:
    """The size of a run."""

    jobs: int  # queue jobs added, in all
    sched_jobs: int  # permanent scheduler jobs (documents)
    max_jobs: int  # the scheduler's slots
    fault_time: float  # seconds of faults at least (they go on until every job is added)
    node_fault_count: int  # whole-node faults, spread over fault_time
    rate: float  # adds per second per worker
    work: float = 0.02  # seconds a worker works on a job before each of its two updates
    workers: int = 4
    gap: tuple = (0.05, 0.4)  # seconds between two faults
    burst: float = 0.3  # chance that an actor kill is followed by a kill of a parent mid-restart
    check_each: float = 0.15  # chance that the tree must be whole again before the next fault
    #: Seconds a process must have lived to be a victim. A process killed while its
    #: first messages reach it makes a monitor's Down wait for Thespian's 35 s
    #: transmit retry; the short run avoids that (it is slow, not wrong).
    min_age: float = 0.0
    node_faults: tuple = NODE_FAULTS  # whole-node faults, taken in turn
    type_timeout: float = 1.0  # the queue type's activity timeout
    owner_timeout: int = 2  # [replicator] doc_owner_timeout
    settle: float = 90.0  # seconds for the queue and the scheduler to settle at the end
    seed: int | None = None


SHORT = ChaosSettings(
    jobs=180,
    sched_jobs=24,
    max_jobs=6,
    fault_time=7.0,
    node_fault_count=2,
    rate=6.5,
    node_faults=("node_kill", "admin_kill"),
    min_age=1.0,
)
LONG = ChaosSettings(
    jobs=5000, sched_jobs=200, max_jobs=20, fault_time=120.0, node_fault_count=8, rate=11.0, settle=240.0
)


def settings_from_env() -> ChaosSettings:
    """SHORT, or LONG when ``OTPJOBS_LONG=1`` (see :func:`checks.settings_from_env`)."""
    return checks.settings_from_env(SHORT, LONG)


@dataclass
class ChaosReport:
    """What a run did and found."""

    seed: int
    faults: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    seconds: float = 0.0

    def fault_total(self) -> int:
        return sum(self.faults.values())

    def summary(self) -> str:
        faults = " ".join(f"{k}={v}" for k, v in sorted(self.faults.items()))
        counts = " ".join(f"{k}={v}" for k, v in self.counts.items())
        return f"chaos seed={self.seed} {self.seconds:.1f}s: {self.fault_total()} faults injected ({faults}); {counts}"


def _node_config(s: ChaosSettings) -> str:
    couch = "".join(f"{k} = {v}\n" for k, v in FAST_COUCH_JOBS.items())
    return (
        f"[couch_jobs]\n{couch}[replicator]\nmax_jobs = {s.max_jobs}\ninterval = 1000\nmax_churn = 2\n"
        f"doc_owner_timeout = {s.owner_timeout}\n"
    )


def _log_time(line: str) -> float | None:
    try:
        stamp = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
        return time.mktime(stamp) + int(line[20:23]) / 1000.0
    except (ValueError, IndexError):
        return None


class Injector:
    """Picks and injects faults, and waits for the node to recover from each."""

    def __init__(
        self, node: CliNode, workers: Workers, s: ChaosSettings, rng: random.Random, report: ChaosReport, n_types: int
    ) -> None:
        self.node, self.workers, self.s, self.rng, self.report = node, workers, s, rng, report
        self.n_types = n_types
        self.log_from = 0
        self.baseline: Snapshot | None = None
        self.names: dict = {}
        self.hit: set = set()
        self.charges: list = []  # (time, supervisor class) of the restarts this run's kills cause

    def count(self, kind: str, detail: str = "") -> None:
        self.report.faults[kind] = self.report.faults.get(kind, 0) + 1
        self.trace(f"fault {kind} {detail}")

    def trace(self, line: str) -> None:
        with open(self.node.workdir / "chaos.log", "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d} {line}\n")

    # ---------------------------------------------------------- the tree
    def started(self) -> None:
        """A node incarnation is up: restart counts start afresh; wait until whole."""
        self.log_from = self.node.log_path.stat().st_size if self.node.log_path.exists() else 0
        self.charges.clear()
        if self.baseline is None:
            self.baseline = wait_until(
                lambda: checks.complete_snapshot(self.node, self.n_types),
                60,
                "the first node's tree",
                step=0.1,
                ignore=(Exception,),
            )
            self.names = checks.registered_names(self.node.client, self.baseline)
        self.wait_recovered("node start")

    def wait_recovered(self, after: str, timeout: float = 45.0) -> None:
        try:
            took = checks.wait_whole(self.node, self.baseline, self.names, self.n_types, timeout, after)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.report.summary()}") from None
        self.trace(f"recovered in {took:.2f}s after {after}")

    # ------------------------------------------------------------ budget
    def recent_restarts(self) -> dict:
        """Restarts per supervisor class within its period: the more of those the
        node logged (``child_exited`` lines) and those this run's kills will cause."""
        now = time.time()
        logged: dict = {}
        with open(self.node.log_path, errors="replace") as f:
            f.seek(self.log_from)
            for line in f:
                if " child_exited supervisor=" not in line:
                    continue
                sup = LOG_NAME.get(line.split(" child_exited supervisor=", 1)[1].split(" ", 1)[0])
                when = _log_time(line)
                if sup is not None and when is not None and now - when <= INTENSITY[sup][1] + 1.0:
                    logged[sup] = logged.get(sup, 0) + 1
        predicted: dict = {}
        for when, sup in self.charges:
            if now - when <= INTENSITY[sup][1] + 1.0:
                predicted[sup] = predicted.get(sup, 0) + 1
        return {sup: max(logged.get(sup, 0), predicted.get(sup, 0)) for sup in set(logged) | set(predicted)}

    @staticmethod
    def charged(proc: Proc) -> list[tuple[str, int]]:
        """(supervisor class, restarts) that the death of ``proc`` costs, cascades included."""
        role = proc.role
        if role in ("activity_monitor", "notifier", "type_monitor"):
            return [("JobsSup", 1)]  # the jobs server monitors them and crashes
        if role in ("activity_monitor_sup", "notifier_sup"):
            return [("JobsSup", 2)]  # and their children die with them: the jobs server may crash too
        if role == "scheduler_job":
            return []  # temporary: the scheduler decides, no restart
        if role == "http_process":
            return [("NodeSupervisor", 1)]  # the HTTP listener actor exits with it
        parent = proc.ancestors[0] if proc.ancestors else None
        return [(parent, 1)] if parent in INTENSITY else []

    def may_kill(self, proc: Proc, recent: dict) -> bool:
        """The restarts it costs leave every supervisor one restart short of giving up."""
        return all(recent.get(sup, 0) + cost <= INTENSITY[sup][0] - 1 for sup, cost in self.charged(proc))

    def charge(self, proc: Proc) -> None:
        for sup, cost in self.charged(proc):
            self.charges += [(time.time(), sup)] * cost

    # ------------------------------------------------------------ faults
    def kill_actor(self) -> bool:
        """SIGKILL one process of the node, chosen from /proc (no actor call, so
        it works while the tree restarts), among those the budget allows."""
        procs = proc_tree(self.node.pgid)
        recent = self.recent_restarts()
        allowed = [
            p
            for p in procs
            if p.cls not in ("MultiProcAdmin", "logger", "NodeSupervisor")
            and p.ancestors
            and p.age >= self.s.min_age
            and self.may_kill(p, recent)
        ]
        if not allowed:
            return False
        roles = sorted({p.role for p in allowed})
        fresh = [r for r in roles if r not in self.hit]
        role = self.rng.choice(fresh or roles)  # each kind of process as likely, whatever their numbers
        victim = self.rng.choice(sorted((p for p in allowed if p.role == role), key=lambda p: (p.ancestors, p.pid)))
        try:
            os.kill(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            return True  # it died meanwhile (an earlier fault's restart)
        self.charge(victim)
        self.hit.add(victim.role)
        self.count(f"kill:{victim.role}", f"pid={victim.pid} under={'/'.join(victim.ancestors[::-1])}")
        if self.rng.random() < self.s.burst:
            self.kill_parent_mid_restart({p.pid for p in procs})
        if self.rng.random() < self.s.check_each:
            self.wait_recovered(f"SIGKILL of {victim.role} (pid {victim.pid})")
        return True

    def kill_parent_mid_restart(self, before: set) -> None:
        """Kill the parent of the first process a restart forks, while that one starts."""
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            procs = proc_tree(self.node.pgid)
            by_pid = {p.pid: p for p in procs}
            for child in procs:
                parent = by_pid.get(child.ppid)
                if child.pid in before or parent is None or parent.cls in ("MultiProcAdmin", "NodeSupervisor"):
                    continue
                if self.may_kill(parent, self.recent_restarts()):
                    try:
                        os.kill(parent.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        return
                    self.charge(parent)
                    self.count(f"kill_mid_restart:{parent.role}", f"pid={parent.pid} child={child.pid}")
                return
            time.sleep(0.002)

    def worker_fault(self, kind: str | None = None) -> None:
        """SIGKILL a worker (it starts again) or pause it past the job type's timeout."""
        name = self.rng.choice(self.workers.names)
        if kind is None:
            kind = "worker_pause" if self.rng.random() < 0.3 and not self.workers.paused else "worker_kill"
        if kind == "worker_pause":
            self.workers.pause(name, self.s.type_timeout * self.rng.uniform(2.5, 3.5))
            self.count("worker_pause", name)
        else:
            self.workers.kill(name)
            self.count("worker_kill", name)

    def node_fault(self, kind: str) -> None:
        node = self.node
        self.wait_recovered("the faults of this node incarnation")
        if kind == "node_kill":
            node.kill()
        else:
            roots = [p.pid for p in proc_tree(node.pgid) if p.cls == "NodeSupervisor"]
            pid = node.admin_pid if kind == "admin_kill" else roots[0]
            os.kill(pid, signal.SIGKILL)
            node.wait_down(expect_status=1, timeout=60)
            assert "node_down reason=node_supervisor_exited" in node.log_tail(), node.log_tail()
        self.count(kind)
        node.start()
        self.started()


def run_chaos(s: ChaosSettings, workdir: Path, out: Callable[[str], Any] = print) -> ChaosReport:
    """One chaos run in ``workdir``; every process it started is gone when it returns."""
    import fdblayer
    from actors import docs, jobs, names
    from actors.settings.config import load, node_name
    from actors.scheduler.client import SchedulerClient

    seed = s.seed if s.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    report = ChaosReport(seed)
    started_at = time.monotonic()
    url = f"sqlite:///{workdir}/store.db"
    db = fdblayer.open(url)
    handler_log = workdir / "handlers.log"
    node = CliNode(url, free_port(), workdir, _node_config(s))
    workers = Workers(url, JOB_TYPE, workdir, s.workers, s.jobs, s.rate, work=s.work)
    doc_ids = [f"doc{i:04d}" for i in range(s.sched_jobs)]
    try:
        jobs.set_type_timeout(db, JOB_TYPE, s.type_timeout)
        for doc_id in doc_ids:
            # A process per job: the checks match each running job to its own
            # process (jobs in job hosts are checked by tests of their own).
            docs.put(
                db,
                "_replicator",
                doc_id,
                {"handler": HANDLER, "continuous": True, "isolation": "process", "options": {"log": str(handler_log)}},
            )
        node.start()
        n_types = len(jobs.get_types(db))  # the queue's type and the documents' reserved type
        injector = Injector(node, workers, s, rng, report, n_types)
        injector.started()
        workers.start_all()
        out(
            f"chaos seed={seed}: node port {node.port}, {s.workers} workers adding {s.jobs} jobs, "
            f"{s.sched_jobs} scheduler jobs with max_jobs {s.max_jobs}"
        )

        faults_from = time.monotonic()
        first = rng.randrange(len(s.node_faults))
        node_faults = s.node_faults[first:] + s.node_faults[:first]
        done = 0  # whole-node faults so far, spread over fault_time
        since = 0  # other faults since the last whole-node fault
        n = 0  # other faults so far: every fourth hits a worker (the first a kill, the second a pause)
        while (
            time.monotonic() - faults_from < s.fault_time
            or done < s.node_fault_count
            or since < 4
            or not workers.all_added()
        ):
            time.sleep(rng.uniform(*s.gap))
            workers.check_running()
            due = (done + 1) * s.fault_time / (s.node_fault_count + 1)
            if done < s.node_fault_count and since >= 4 and time.monotonic() - faults_from >= due:
                injector.node_fault(node_faults[done % len(node_faults)])
                done, since = done + 1, 0
                continue
            n, since = n + 1, since + 1
            if n % 4 == 1 or not injector.kill_actor():
                injector.worker_fault({1: "worker_kill", 5: "worker_pause"}.get(n))
        workers.resume_all()
        fault_end = time.monotonic()

        # Settle: every job added is finished (re-enqueued ones too), then the workers stop.
        def all_finished() -> bool:
            workers.check_running()
            infos = jobs.get_jobs(db, JOB_TYPE)
            return workers.all_added() and all(i.state == "finished" for i in infos)

        wait_until(all_finished, s.settle, "every queue job to be finished", step=0.2)
        workers.finish(60)
        report.counts["settle_s"] = round(time.monotonic() - fault_end, 1)
        infos = {i.id: i for i in jobs.get_jobs(db, JOB_TYPE)}
        report.problems += checks.check_queue(workers.read(), infos, report.counts)

        sched = SchedulerClient(node.client, timeout=30)
        name = node_name(load(None, {("node", "port"): node.port}))
        seen: list = []

        def scheduler_settled() -> bool:
            counts: dict = {}
            kids = node.client.which_children(names.SCHEDULER_SUP)
            pids = {k.pid for k in kids if k.addr is not None}
            problems = checks.check_scheduler(sched.jobs(), pids, str(handler_log), doc_ids, s.max_jobs, counts)
            problems += checks.check_docs(
                docs.list_docs(db, "_replicator")[1], jobs.get_jobs(db, docs.DOCS_TYPE), name, len(doc_ids), counts
            )
            seen[:] = [problems, counts]
            return not problems

        try:
            wait_until(scheduler_settled, s.settle, "the scheduler to settle", step=0.5, ignore=(Exception,))
        except AssertionError:
            report.problems += seen[0] if seen else ["the scheduler never answered"]
        report.counts.update(seen[1] if seen else {})
        try:
            injector.wait_recovered("the run")
        except AssertionError as exc:
            report.problems.append(str(exc))
        report.problems += _busy_processes(node.pgid)
        report.counts["node_incarnations"] = node.incarnations
        node.stop()
        left = {pgid: group_pids(pgid) for pgid in node.pgids if group_pids(pgid)}
        if left:
            report.problems.append(f"processes left by node incarnations: {left}")
    finally:
        report.seconds = time.monotonic() - started_at
        try:
            workers.cleanup()
        finally:
            node.cleanup()
            db.close()
    out(report.summary())
    return report


def _busy_processes(pgid: int, window: float = 1.0, limit: float = 0.9) -> list[str]:
    """Processes of the group that used more than ``limit`` of a CPU over ``window``
    seconds while nothing happens (a busy loop)."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> dict:
        out = {}
        for pid in group_pids(pgid):
            try:
                fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            out[pid] = (int(fields[11]) + int(fields[12])) / tick
        return out

    before = cpu()
    time.sleep(window)
    after = cpu()
    busy = {
        pid: after[pid] - before[pid] for pid in after if pid in before and after[pid] - before[pid] > limit * window
    }
    return [
        f"busy loop: {line} used {busy[pid]:.1f}s CPU in {window}s"
        for pid, line in zip(sorted(busy), describe(set(busy)))
    ]
