"""What must hold after a chaos run: the queue against the ledger, the scheduler,
the tree.

Each check returns a list of problems (empty when it holds) and fills a
counts dict, so a failing run says everything that is wrong at once, with
the counts next to it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .handlers import running_jobs
from .nodes import CliNode, Snapshot
from .queue_worker import Ledger

FINISHED = "finished"


def check_queue(ledger: Ledger, infos: dict, counts: dict) -> list[str]:
    """Every added job is in the store and finished exactly once; the ledger agrees.

    ``infos``: job id -> JobInfo of every job of the type, read after the
    workers stopped and every job was finished.
    """
    problems = []
    store = set(infos)
    lost = ledger.added - store
    if lost:
        problems.append(f"{len(lost)} jobs added (commit recorded) but missing from the store: {sorted(lost)[:10]}")
    phantom = store - ledger.intents
    if phantom:
        problems.append(f"{len(phantom)} jobs in the store no worker meant to add: {sorted(phantom)[:10]}")
    twice = {job_id: who for job_id, who in ledger.finished.items() if len(who) > 1}
    if twice:
        problems.append(f"{len(twice)} jobs finished more than once: {dict(list(twice.items())[:5])}")
    not_finished = {job_id: info.state for job_id, info in infos.items() if info.state != FINISHED}
    if not_finished:
        problems.append(f"{len(not_finished)} jobs not finished after the run: {dict(list(not_finished.items())[:10])}")
    unrecorded = 0
    for job_id, info in infos.items():
        if info.state != FINISHED:
            continue
        by, lock = info.data.get("by"), info.data.get("lock")
        recorded = ledger.finished.get(job_id)
        if recorded:
            if (by, lock) not in recorded:
                problems.append(f"{job_id}: finished in the store by {by}/{lock}, the ledger says {recorded}")
            continue
        # Only a worker killed between its finish commit and its ledger line may leave this.
        who = ledger.finishing.get((job_id, lock))
        name, _, incarnation = (who or "..").partition(".")
        if who != by or not incarnation.isdigit() or int(incarnation) not in ledger.cut_short.get(name, set()):
            problems.append(
                f"{job_id}: finished in the store by {by}/{lock} with no ledger record (finishing by {who})"
            )
        else:
            unrecorded += 1
    for job_id, lock, step, who in ledger.halts:
        info = infos.get(job_id)
        if info is not None and info.data.get("by") == who and info.data.get("lock") == lock:
            problems.append(f"{job_id}: {who} got Halt on {step} yet its finish committed")
    counts.update(
        jobs_checked=len(store),
        finished=sum(1 for i in infos.values() if i.state == FINISHED),
        finished_in_ledger=sum(1 for v in ledger.finished.values() if v),
        finished_by_killed_workers=unrecorded,
        halts=len(ledger.halts),
        adds_not_committed=len(ledger.intents - store),
        added_unrecorded=len(store - ledger.added),
        accepts=ledger.accepted,
        worker_store_errors=len(ledger.errors),
    )
    return problems


def check_scheduler(
    sched_jobs: list[dict], live_job_pids: set[int], handler_log: str, doc_ids: list[str], max_jobs: int, counts: dict
) -> list[str]:
    """Every document is in the table once; max_jobs run, each in one process."""
    problems = []
    mine = [j for j in sched_jobs if j.get("database") == "_replicator"]
    ids = sorted(j["doc_id"] for j in mine)
    if ids != sorted(doc_ids):
        missing = sorted(set(doc_ids) - set(ids))
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        problems.append(
            f"scheduler table: {len(ids)} of {len(doc_ids)} documents, missing {missing[:10]}, twice {dupes[:10]}"
        )
    running = {j["id"] for j in mine if j["pid"] not in (None, "<starting>")}
    if len(running) != max_jobs:
        problems.append(f"{len(running)} jobs running, not max_jobs={max_jobs}")
    if len(live_job_pids) != len(running):
        problems.append(f"{len(live_job_pids)} job processes under scheduler_sup for {len(running)} running jobs")
    by_pid = running_jobs(handler_log, live_job_pids)
    ran = sorted(by_pid.values())
    if len(set(ran)) != len(ran):
        problems.append(f"a job runs in two processes: {by_pid}")
    if set(ran) != running:
        problems.append(f"job processes run {sorted(set(ran))[:5]}..., the table says {sorted(running)[:5]}...")
    counts.update(sched_docs_checked=len(mine), sched_running=len(running))
    return problems


def check_docs(docs_page: list, queue_infos: list, node_name: str, n_docs: int, counts: dict) -> list[str]:
    """Every document is still in the store, held by this node (none lost)."""
    problems = []
    if len(docs_page) != n_docs:
        problems.append(f"{len(docs_page)} documents in the store, not {n_docs}")
    allowed = {"running", "pending", "crashing", "initializing"}
    bad = [(d.doc_id, d.state, d.node) for d in docs_page if d.state not in allowed or d.node != node_name]
    if bad:
        problems.append(f"documents in a wrong state or not on {node_name}: {bad[:10]}")
    held = [i for i in queue_infos if i.state == "running"]
    if len(held) != n_docs or len(queue_infos) != n_docs:
        problems.append(f"{len(held)} of {len(queue_infos)} document queue jobs held, want all {n_docs}")
    counts.update(docs_checked=len(docs_page), docs_crashing=sum(1 for d in docs_page if d.state == "crashing"))
    return problems


def check_whole(snap: Snapshot, baseline: Snapshot, names: dict, whereis: Any, n_types: int) -> list[str]:
    """The tree has every child the fresh node had, alive and registered under its name.

    ``names``: path -> registered name of the static children that have one;
    ``whereis``: name -> address (the node's registry).
    """
    from tests.procs import pid_alive

    problems = []

    def static(s: Snapshot) -> dict:
        return {a.path: a for a in s.actors if all(isinstance(p, str) for p in a.path)}

    now, then = static(snap), static(baseline)
    missing = sorted(set(then) - set(now), key=str)
    if missing:
        problems.append(f"children not running: {missing}")
    dead = [(a.path, a.pid) for a in snap.actors if not pid_alive(a.pid)]
    if dead:
        problems.append(f"children listed with a dead process: {dead}")
    for path, name in names.items():
        actor = now.get(path)
        if actor is not None and whereis(name) != actor.addr:
            problems.append(f"{name} is not registered to {path}")
    roles = snap.by_role()
    for role in ("activity_monitor", "notifier", "type_monitor"):
        if len(roles.get(role, [])) != n_types:
            problems.append(f"{len(roles.get(role, []))} {role} processes for {n_types} job types")
    if len(roles.get("http_process", [])) != 1:
        problems.append(f"{len(roles.get('http_process', []))} HTTP processes")
    if len(roles.get("logger", [])) != 1:
        problems.append(f"{len(roles.get('logger', []))} Thespian loggers")
    return problems


def registered_names(client: Any, snap: Snapshot) -> dict:
    """path -> registered name of the static children that have one (from their specs)."""
    names = {}
    for a in snap.actors:
        if a.path and all(isinstance(p, str) for p in a.path):
            parent = next(b for b in snap.actors if b.path == a.path[:-1])
            name = client.get_childspec(parent.addr, a.path[-1]).get("name")
            if name:
                names[a.path] = name
    return names


def complete_snapshot(node: CliNode, n_types: int) -> Snapshot | None:
    """The tree once its per-type actors and HTTP process run (None before)."""
    snap = node.snapshot()
    roles = snap.by_role()
    ready = all(len(roles.get(r, [])) == n_types for r in ("activity_monitor", "notifier", "type_monitor"))
    return snap if ready and roles.get("http_process") else None


def wait_whole(node: CliNode, baseline: Snapshot, names: dict, n_types: int, timeout: float, after: str) -> float:
    """Wait until the tree is whole and has no stray process; seconds it took.

    Raises:
        AssertionError: naming what is still wrong after ``timeout``.
    """
    import time

    from tests.procs import wait_until

    from .nodes import describe

    began = time.monotonic()
    seen: list = []

    def whole() -> bool:
        seen[:] = check_whole(node.snapshot(), baseline, names, node.client.whereis, n_types)
        return not seen

    try:
        wait_until(whole, timeout, "the tree to be whole", step=0.05, ignore=(Exception,))
    except AssertionError:
        raise AssertionError(f"tree not whole {timeout}s after {after}: {seen}\n{node.log_tail()}") from None
    left: list = []

    def clean() -> bool:
        left[:] = sorted(node.strays())
        return not left

    try:
        wait_until(clean, 15, "no stray process", step=0.1, ignore=(Exception,))
    except AssertionError:
        raise AssertionError(f"stray processes in the node's group after {after}: {describe(set(left))}") from None
    return time.monotonic() - began


def settings_from_env(short: Any, long: Any) -> Any:
    """``short``, or ``long`` when ``OTPJOBS_LONG=1``; ``OTPJOBS_FAULT_SEED``
    replays a seed (both are dataclasses with a ``seed`` field)."""
    chosen = long if os.environ.get("OTPJOBS_LONG") == "1" else short
    seed = os.environ.get("OTPJOBS_FAULT_SEED")
    return dataclasses.replace(chosen, seed=int(seed)) if seed else chosen
