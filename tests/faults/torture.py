"""Store torture: eight processes on one SQLite file, SIGKILLed at random.

Each process (:mod:`tests.faults.store_worker`) mixes jobs-API calls and
raw transactions and keeps a ledger; the run SIGKILLs one of them every
few tens of milliseconds and starts it again. Afterwards the file must
pass ``PRAGMA integrity_check`` and the store must agree with the ledgers
(:func:`check_store`): nothing committed is lost, no transaction is half
applied, no update is lost, no item or plain job is taken twice, the
pending queue holds exactly the pending jobs.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tests.procs import kill_groups

from . import checks
from .nodes import ROOT
from .store_worker import CHURN, PLAIN, read_ledger


@dataclass(frozen=True)
class TortureSettings:
    seconds: float  # of random kills
    processes: int = 8
    items: int = 3000  # raw items to claim
    gap: tuple = (0.05, 0.3)  # seconds between two kills
    seed: int | None = None


SHORT = TortureSettings(seconds=4.0)
LONG = TortureSettings(seconds=90.0, items=30000)


def settings_from_env() -> TortureSettings:
    """SHORT, or LONG when ``OTPJOBS_LONG=1`` (see :func:`checks.settings_from_env`)."""
    return checks.settings_from_env(SHORT, LONG)


@dataclass
class TortureReport:
    seed: int
    counts: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return f"torture seed={self.seed} {self.seconds:.1f}s: " + " ".join(f"{k}={v}" for k, v in self.counts.items())


class StoreWorkers:
    """The torture processes, each in its own session."""

    def __init__(self, url: str, workdir: Path, n: int, items: int) -> None:
        self.url, self.dir, self.items = url, workdir, items
        self.stop_file = workdir / "torture.stop"
        self.names = [f"s{i}" for i in range(n)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.incarnation = dict.fromkeys(self.names, 0)
        self.pids: set[int] = set()

    def ledger(self, name: str) -> Path:
        return self.dir / f"{name}.ledger"

    def start(self, name: str) -> None:
        self.incarnation[name] += 1
        err = open(self.dir / f"{name}.{self.incarnation[name]}.err", "w")
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.faults.store_worker",
                self.url,
                name,
                str(self.incarnation[name]),
                str(self.ledger(name)),
                str(self.stop_file),
                str(self.items),
            ],
            cwd=str(ROOT),
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=err,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        err.close()
        self.pids.add(self.procs[name].pid)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
        self.start(name)

    def check_running(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                out = (self.dir / f"{name}.{self.incarnation[name]}.err").read_text()
                raise AssertionError(f"store worker {name} exited {proc.returncode}: {out[-3000:]}")

    def stop(self, timeout: float = 60.0) -> None:
        self.stop_file.touch()
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            code = proc.wait(max(0.1, deadline - time.monotonic()))
            out = (self.dir / f"{name}.{self.incarnation[name]}.err").read_text()
            assert code == 0, f"store worker {name} exited {code}: {out[-3000:]}"

    def cleanup(self) -> None:
        kill_groups(self.procs.values(), self.pids, "store worker")


def run_torture(s: TortureSettings, workdir: Path, out: Callable[[str], Any] = print) -> TortureReport:
    """One torture run in ``workdir``; every process it started is gone when it returns."""
    import fdb.tuple

    import fdblayer
    from fdblayer.jobs import api

    seed = s.seed if s.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    report = TortureReport(seed)
    started = time.monotonic()
    path = workdir / "torture.db"
    url = f"sqlite:///{path}"
    db = fdblayer.open(url)
    workers = StoreWorkers(url, workdir, s.processes, s.items)
    try:
        api.set_type_timeout(db, PLAIN, 3600)
        api.set_type_timeout(db, CHURN, 1)
        for first in range(0, s.items, 1000):

            @fdblayer.transactional
            def seed_items(tr, first=first):
                for i in range(first, min(first + 1000, s.items)):
                    tr[fdb.tuple.pack(("pending", i))] = b""

            seed_items(db)
        for name in workers.names:
            workers.start(name)
        kills = 0
        until = time.monotonic() + s.seconds
        while time.monotonic() < until:
            time.sleep(rng.uniform(*s.gap))
            workers.check_running()
            workers.kill(rng.choice(workers.names))
            kills += 1
        time.sleep(0.5)  # the last ones get going again
        workers.check_running()
        workers.stop()
        db.close()
        raw = sqlite3.connect(str(path))
        try:
            integrity = raw.execute("PRAGMA integrity_check").fetchall()
        finally:
            raw.close()
        if integrity != [("ok",)]:
            report.problems.append(f"PRAGMA integrity_check: {integrity[:10]}")
        db = fdblayer.open(url)
        ledgers = [read_ledger(workers.ledger(name)) for name in workers.names]
        report.counts.update(kills=kills, processes_started=sum(workers.incarnation.values()))
        report.problems += check_store(db, ledgers, s.items, report.counts)
    finally:
        report.seconds = time.monotonic() - started
        try:
            workers.cleanup()
        finally:
            db.close()
    out(report.summary())
    return report


def _keys(db: Any, prefix: tuple) -> list:
    import fdb.tuple

    begin = fdb.tuple.pack(prefix)
    return [(fdb.tuple.unpack(kv.key), kv.value) for kv in db.get_range(begin, begin + b"\xff")]


def check_store(db: Any, ledgers: list, items: int, counts: dict) -> list[str]:
    """The store against the ledgers of every process (see the module docstring)."""
    from fdblayer.jobs import api

    problems: list[str] = []
    cut: set = set().union(*(c for _, c in ledgers))
    by_kind: dict = collections.defaultdict(list)
    for lines, _ in ledgers:
        for tag, parts in lines:
            by_kind[parts[0]].append((tag, parts))

    # read-modify-write and atomic counters: equal to their markers, none lost
    for kind, counter_key, decode in (
        ("inc", b"counter", lambda v: int(v or b"0")),
        ("atomic", b"atomic", lambda v: int.from_bytes(v or b"", "little")),
    ):
        markers = {(k[1], k[2]) for k, _ in _keys(db, (kind,))}
        value = decode(db.get(counter_key))
        if value != len(markers):
            problems.append(f"{kind} counter is {value} but {len(markers)} transactions committed a marker")
        lost = {(p[1], int(p[2])) for _, p in by_kind[kind]} - markers
        if lost:
            problems.append(f"{len(lost)} committed {kind} transactions lost: {sorted(lost)[:5]}")
        counts[f"{kind}_commits"] = len(markers)

    # versionstamps: all kept, increasing in each process's commit order
    stamps = {(k[1], k[3]): k[2].tr_version.hex() for k, _ in _keys(db, ("vs",))}
    for _, p in by_kind["stamp"]:
        if stamps.get((p[1], int(p[2]))) != p[3]:
            problems.append(f"stamp {p[1:3]}: ledger {p[3]}, store {stamps.get((p[1], int(p[2])))}")
    per_tag: dict = collections.defaultdict(list)
    for (tag, seq), value in stamps.items():
        per_tag[tag].append((seq, value))
    for tag, seq_stamps in per_tag.items():
        ordered = [v for _, v in sorted(seq_stamps)]
        if ordered != sorted(ordered) or len(set(ordered)) != len(ordered):
            problems.append(f"versionstamps of {tag} not increasing with its commits")
    counts["stamps"] = len(stamps)

    # claims: every item either pending or claimed once, by whom the ledger says
    claimed = {k[1]: v.decode() for k, v in _keys(db, ("claimed",))}
    pending = {k[1] for k, _ in _keys(db, ("pending",))}
    if set(claimed) & pending or set(claimed) | pending != set(range(items)):
        problems.append(
            f"claims: {len(claimed)} claimed + {len(pending)} pending != {items} items, "
            f"both: {sorted(set(claimed) & pending)[:5]}"
        )
    ledger_claims = collections.Counter(int(p[1]) for _, p in by_kind["claim"])
    twice = [item for item, n in ledger_claims.items() if n > 1]
    if twice:
        problems.append(f"items claimed twice: {twice[:10]}")
    for _, p in by_kind["claim"]:
        if claimed.get(int(p[1])) != p[2]:
            problems.append(f"item {p[1]} claimed by {p[2]} per its ledger, by {claimed.get(int(p[1]))} in the store")
    unrecorded = [item for item, who in claimed.items() if item not in ledger_claims and who not in cut]
    if unrecorded:
        problems.append(f"items claimed with no ledger line by a process that was not killed: {unrecorded[:5]}")
    counts["claims"] = len(claimed)

    problems += _check_plain(db, by_kind, cut, counts)

    # churn jobs: added and not removed are there, removed ones are gone
    churn = {i.id: i for i in api.get_jobs(db, CHURN)}
    intents = {p[1] for _, p in by_kind["c-intent"]}
    removed = {p[1] for _, p in by_kind["c-removed"]}
    added = {p[1] for _, p in by_kind["c-added"]}
    if set(churn) - intents:
        problems.append(f"churn jobs no process added: {sorted(set(churn) - intents)[:5]}")
    # gone with no removal recorded: only if a process was killed between a remove's commit and its line
    removing_by_killed = {p[1] for tag, p in by_kind["c-removing"] if tag in cut}
    lost = (added - removed) - set(churn) - removing_by_killed
    if lost:
        problems.append(f"churn jobs added (recorded), never removed, but gone: {sorted(lost)[:5]}")
    if removed & set(churn):
        problems.append(f"churn jobs removed (recorded) but still there: {sorted(removed & set(churn))[:5]}")
    counts["churn_jobs"] = len(churn)
    counts["churn_removed"] = len(removed)
    counts["churn_removed_by_killed"] = len(((added - removed) - set(churn)) & removing_by_killed)

    # the pending queue holds exactly the pending jobs, each accepted once
    for job_type in (PLAIN, CHURN):
        want = sorted(i.id for i in api.get_jobs(db, job_type) if i.state == "pending")
        got = []
        for _ in range(len(want) + 5):
            try:
                job, _ = api.accept(db, job_type, timeout=0)
            except api.NotFound:
                break
            got.append(job.id)
        if sorted(got) != want:
            problems.append(
                f"{job_type}: the queue gave {len(got)} jobs for {len(want)} pending, "
                f"extra {sorted(set(got) - set(want))[:5]}, missing {sorted(set(want) - set(got))[:5]}"
            )
        counts[f"{job_type}_drained"] = len(got)
    errors = [p for _, p in by_kind["error"]]
    if errors:
        problems.append(f"{len(errors)} store errors in the workers: {[' '.join(e) for e in errors[:5]]}")
    return problems


def _check_plain(db: Any, by_kind: dict, cut: set, counts: dict) -> list[str]:
    """Plain jobs are never re-enqueued: each is accepted at most once, never Halted."""
    from fdblayer.jobs import api

    problems = []
    jobs = {i.id: i for i in api.get_jobs(db, PLAIN)}
    intents = {p[1] for _, p in by_kind["p-intent"]}
    added = {p[1] for _, p in by_kind["p-added"]}
    accepted: dict = collections.defaultdict(list)
    for tag, p in by_kind["p-accepted"]:
        accepted[p[1]].append((tag, p[2]))
    finishing = {(p[1], p[2]): tag for tag, p in by_kind["p-finishing"]}
    finished: dict = collections.defaultdict(list)
    for tag, p in by_kind["p-finished"]:
        finished[p[1]].append((tag, p[2]))
    if added - set(jobs):
        problems.append(f"plain jobs added (recorded) but missing: {sorted(added - set(jobs))[:5]}")
    if set(jobs) - intents:
        problems.append(f"plain jobs no process added: {sorted(set(jobs) - intents)[:5]}")
    twice = {job_id: who for job_id, who in accepted.items() if len(who) > 1}
    if twice:
        problems.append(f"plain jobs accepted twice: {dict(list(twice.items())[:5])}")
    if by_kind["p-halt"]:
        problems.append(f"Halt on plain jobs (never re-enqueued): {[p for _, p in by_kind['p-halt']][:5]}")
    for job_id, info in jobs.items():
        took = accepted.get(job_id, [])
        if info.state == "finished":
            by, lock = info.data.get("by"), info.data.get("lock")
            if finished.get(job_id):
                if finished[job_id] != [(by, lock)]:
                    problems.append(f"{job_id}: finished by {by}/{lock}, ledger {finished[job_id]}")
            elif finishing.get((job_id, lock)) != by or by not in cut:
                problems.append(f"{job_id}: finished by {by}/{lock} with no ledger record")
            if took and took[0][1] != lock:
                problems.append(f"{job_id}: finished under lock {lock}, accepted under {took[0][1]}")
        elif info.state == "running":
            if took and took[0][1] != info.lock:
                problems.append(f"{job_id}: running under lock {info.lock}, accepted under {took[0][1]}")
            if not took and not cut:
                problems.append(f"{job_id}: running with no accept recorded")
        elif took:
            problems.append(f"{job_id}: pending again after {took} accepted it")
    for job_id, who in finished.items():
        info = jobs.get(job_id)
        if info is None or info.state != "finished":
            problems.append(f"{job_id}: finish recorded by {who}, store says {info and info.state}")
    counts.update(
        plain_jobs=len(jobs),
        plain_accepted=len(accepted),
        plain_finished=sum(1 for i in jobs.values() if i.state == "finished"),
    )
    return problems
