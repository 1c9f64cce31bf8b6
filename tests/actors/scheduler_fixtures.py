"""Handlers used by the scheduler tests (importable by the node's processes).

Each takes a :class:`~actors.handlers.JobContext`. ``options`` carry
the knobs: ``log`` (a file where lifecycle lines are appended), ``path``
(a file whose existence ends a one-shot job).
"""

from __future__ import annotations

import os
import time
from typing import Any


def record(ctx: Any, line: str) -> None:
    path = ctx.options.get("log")
    if path:
        with open(path, "a") as f:
            f.write(f"{line} {ctx.job_id} {os.getpid()}\n")


def forever(ctx: Any) -> None:
    """Run until stopped, counting ticks from the last checkpoint; checkpoint on stop."""
    record(ctx, "start")
    ticks = (ctx.last_checkpoint or {}).get("ticks", 0)
    while not ctx.wait(0.02):
        ticks += 1
        ctx.report(ticks=ticks)
    ctx.checkpoint({"ticks": ticks})
    record(ctx, "stop")


def idle(ctx: Any) -> None:
    """Run until stopped, doing nothing (benchmarks)."""
    ctx.wait(24 * 3600)


def quick(ctx: Any) -> None:
    """A one-shot job that completes at once."""
    record(ctx, "start")
    ctx.report(done=True)


def crash(ctx: Any) -> None:
    """A job that crashes at once."""
    record(ctx, "start")
    raise RuntimeError("boom on purpose")


def until_file(ctx: Any) -> None:
    """A one-shot job that completes when options['path'] exists."""
    record(ctx, "start")
    while not os.path.exists(ctx.options["path"]):
        if ctx.wait(0.02):
            record(ctx, "stop")
            return
    record(ctx, "done")


def stubborn(ctx: Any) -> None:
    """Ignores stop: loops in Python until JobStopping is raised inside it."""
    record(ctx, "start")
    try:
        while True:
            time.sleep(0.05)
    finally:
        record(ctx, "end")


def lingering(ctx: Any) -> None:
    """Runs until stopped, then takes ``options['linger']`` seconds to clean
    up; its start and end lines carry the wall time second (``start <time>
    <job id> <pid>``)."""
    record(ctx, f"start {time.time():.6f}")
    while not ctx.wait(0.02):
        pass
    time.sleep(ctx.options["linger"])
    record(ctx, f"end {time.time():.6f}")


def blocked(ctx: Any) -> None:
    """Ignores stop while blocked in native code (one long sleep)."""
    record(ctx, "start")
    time.sleep(3600)


def checkpointing(ctx: Any) -> None:
    """A typical I/O-bound job: waits (as on a socket), checkpoints each second."""
    n = (ctx.last_checkpoint or {}).get("n", 0)
    while not ctx.wait(1.0):
        n += 1
        ctx.checkpoint({"n": n})
    ctx.checkpoint({"n": n})


def ledger(ctx: Any) -> None:
    """Records in ``options['ledger']`` its start, each tick of work (every
    ``options['tick']`` seconds, stamped before it checks that it may still
    run) and its stop, with its process group (the node) and the wall time."""

    def write(kind: str, when: float) -> None:
        with open(ctx.options["ledger"], "a") as f:
            f.write(f"{kind} {ctx.options['doc']} {os.getpgid(0)} {when:.6f}\n")

    write("start", time.time())
    while True:
        now = time.time()
        if ctx.stopping:
            break
        write("tick", now)
        if ctx.wait(ctx.options.get("tick", 0.05)):
            break
    write("stop", time.time())


def checkpoint_ledger(ctx: Any) -> None:
    """Records each start with the checkpoint it resumes from (``start
    <json>`` in ``options['ledger']``), then checkpoints a count every 0.1 s."""
    import json

    with open(ctx.options["ledger"], "a") as f:
        f.write(f"start {json.dumps(ctx.last_checkpoint, separators=(',', ':'))}\n")
    n = (ctx.last_checkpoint or {}).get("n", 0)
    while not ctx.wait(0.1):
        n += 1
        ctx.checkpoint({"n": n})
