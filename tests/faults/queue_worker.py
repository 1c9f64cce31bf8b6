"""A queue worker process that keeps a ledger, and the ledger's reader.

``python -m tests.faults.queue_worker STORE TYPE NAME --ledger FILE ...``
adds its share of jobs (ids ``<name>-<seq>``) while it accepts, updates and
finishes any job of the type, until its quota is added, the stop file
exists and no job is left. Every step is one line of its ledger (one file
per worker name; a restarted worker appends to it), written around the
store call it records::

    start <incarnation> <pid>
    intent <id>                   before add; flushed
    added <id>                    after add committed; flushed and fsynced
    accepted <id> <lock>          after accept committed
    halt <id> <lock> <step>       update or finish raised Halt (not finished)
    finishing <id> <lock>         before finish; flushed
    finished <id> <lock>          after finish committed; flushed and fsynced
    error <op> <id> <reason>      a store error (the call did not commit)

Flushed lines survive a SIGKILL of the worker (they are in the kernel), so
a killed worker's ledger ends at most one step short of the store: a job
can be finished in the store with only its ``finishing`` line, never the
other way round. The finished job's data names the worker incarnation and
the lock (``{"by": "<name>.<incarnation>", "lock": ...}``) so the store
says who finished it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


def _line(ledger: IO[str], text: str, sync: bool = False) -> None:
    ledger.write(text + "\n")
    ledger.flush()
    if sync:
        os.fsync(ledger.fileno())


def next_seq(path: Path) -> int:
    """The first sequence number no incarnation of this worker has used."""
    seq = 0
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "intent":
                seq = max(seq, int(parts[1].rsplit("-", 1)[1]) + 1)
    return seq


def run(opts: argparse.Namespace) -> int:
    import fdblayer
    from actors import jobs
    from fdblayer.exceptions import StoreError

    db = fdblayer.open(opts.store)
    ledger_path = Path(opts.ledger)
    seq = next_seq(ledger_path)
    tag = f"{opts.name}.{opts.incarnation}"
    ledger = open(ledger_path, "a")
    _line(ledger, f"start {opts.incarnation} {os.getpid()}")
    stop = Path(opts.stop)
    gap = 1.0 / opts.rate if opts.rate > 0 else 0.0
    next_add = time.monotonic()
    counts = dict.fromkeys(("added", "finished", "halts", "errors"), 0)

    def error(op: str, job_id: str, exc: Exception) -> None:
        counts["errors"] += 1
        _line(ledger, f"error {op} {job_id} {type(exc).__name__}:{str(exc).replace(chr(10), ' ')[:200]}")
        time.sleep(0.05)

    while True:
        if seq < opts.quota and time.monotonic() >= next_add:
            job_id = f"{opts.name}-{seq:06d}"
            _line(ledger, f"intent {job_id}")
            seq += 1
            next_add = max(next_add + gap, time.monotonic() - 1.0)
            try:
                jobs.add(db, opts.type, job_id, {"by": opts.name})
                _line(ledger, f"added {job_id}", sync=True)
                counts["added"] += 1
            except StoreError as exc:
                error("add", job_id, exc)
        wait = 0.2 if seq >= opts.quota else max(0.0, min(0.2, next_add - time.monotonic()))
        try:
            job, _ = jobs.accept(db, opts.type, timeout=wait)
        except jobs.NotFound:
            if seq >= opts.quota and stop.exists():
                break
            continue
        except StoreError as exc:
            error("accept", "-", exc)
            continue
        _line(ledger, f"accepted {job.id} {job.lock}")
        step = "update"
        try:
            for n in range(opts.updates):
                time.sleep(opts.work)  # the work the update reports progress on
                job = jobs.update(db, job, {"by": tag, "step": n})
            step = "finish"
            _line(ledger, f"finishing {job.id} {job.lock}")
            jobs.finish(db, job, {"by": tag, "lock": job.lock})
            _line(ledger, f"finished {job.id} {job.lock}", sync=True)
            counts["finished"] += 1
        except jobs.Halt:
            _line(ledger, f"halt {job.id} {job.lock} {step}")
            counts["halts"] += 1
        except StoreError as exc:
            error(step, job.id, exc)
    _line(ledger, "exit")
    ledger.close()
    db.close()
    print(json.dumps(counts), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults.queue_worker")
    p.add_argument("store")
    p.add_argument("type")
    p.add_argument("name")
    p.add_argument("--ledger", required=True)
    p.add_argument("--stop", required=True, help="exit once this file exists and nothing is left to do")
    p.add_argument("--quota", type=int, required=True, help="jobs this worker adds (over all incarnations)")
    p.add_argument("--rate", type=float, default=0.0, help="adds per second (0: as fast as it can)")
    p.add_argument("--updates", type=int, default=2, help="updates per job before finish")
    p.add_argument("--work", type=float, default=0.0, help="seconds of work before each update")
    p.add_argument("--incarnation", type=int, default=1)
    return run(p.parse_args(argv))


# ----------------------------------------------------------------- reading


@dataclass
class Ledger:
    """Every worker's ledger lines, by kind."""

    intents: set = field(default_factory=set)
    added: set = field(default_factory=set)
    #: job id -> [(worker name, lock)] of each ``finished`` line
    finished: dict = field(default_factory=lambda: defaultdict(list))
    #: (job id, lock) -> worker name, of each ``finishing`` line
    finishing: dict = field(default_factory=dict)
    halts: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    accepted: int = 0
    #: worker name -> incarnations whose last line is not ``exit`` (killed)
    cut_short: dict = field(default_factory=lambda: defaultdict(set))


def read_ledgers(paths: list[Path]) -> Ledger:
    """Parse the ledgers of every worker (a torn last line is ignored)."""
    out = Ledger()
    for path in paths:
        name = path.stem
        text = path.read_text() if path.exists() else ""
        lines = text.split("\n")
        if lines and lines[-1] != "":
            lines = lines[:-1]  # a line the worker was killed while writing
        incarnation, last = None, None
        for line in lines:
            parts = line.split()
            if not parts:
                continue
            kind = parts[0]
            if kind == "start":
                if incarnation is not None and last != "exit":
                    out.cut_short[name].add(incarnation)
                incarnation = int(parts[1])
            elif kind == "intent":
                out.intents.add(parts[1])
            elif kind == "added":
                out.added.add(parts[1])
            elif kind == "accepted":
                out.accepted += 1
            elif kind == "finishing":
                out.finishing[(parts[1], parts[2])] = f"{name}.{incarnation}"
            elif kind == "finished":
                out.finished[parts[1]].append((f"{name}.{incarnation}", parts[2]))
            elif kind == "halt":
                out.halts.append((parts[1], parts[2], parts[3], f"{name}.{incarnation}"))
            elif kind == "error":
                out.errors.append(line)
            last = kind
        if incarnation is not None and last != "exit":
            out.cut_short[name].add(incarnation)
    return out


if __name__ == "__main__":
    sys.exit(main())
