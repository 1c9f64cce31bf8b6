"""Worker hosts for the tests: real ``otpjobs worker`` processes, real handler modules.

A host runs as a user runs it (``python -m actors worker ...`` with its
handler module in the working directory), in its own session so that a
test can SIGTERM it, SIGKILL it, or kill what is left of its group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

from supervision import runtime
from tests.procs import free_port, group_pids, kill_groups, wait_until

ROOT = Path(__file__).resolve().parents[2]

#: Handlers the tests serve, written as ``handlers_mod.py`` in the host's directory.
HANDLERS = """
import json, os, signal, time

def _log(ctx, event):
    path = os.environ.get("RUN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"id": ctx.id, "event": event, "pid": os.getpid(), "t": time.time(),
                                "attempt": ctx.attempt}) + "\\n")

def add(ctx):
    _log(ctx, "start")
    ctx.progress(half=True)
    _log(ctx, "end")
    return ctx.data["a"] + ctx.data["b"]

def fail_until(ctx):
    _log(ctx, "start")
    if ctx.attempt < ctx.data.get("ok_at", 10**9):
        raise ValueError(f"failed attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}

def die_first(ctx):
    _log(ctx, "start")
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return ctx.attempt

def sleepy(ctx):
    _log(ctx, "start")
    ctx.wait_stopping(ctx.data.get("s", 1.0))
    _log(ctx, "end")
    return "stopped" if ctx.stopping else "slept"

def until_stopped(ctx):
    _log(ctx, "start")
    ctx.wait_stopping(60)
    _log(ctx, "stopping" if ctx.stopping else "end")
    return "late"

def pid(ctx):
    _log(ctx, "start")
    with open(ctx.data["pidfile"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(ctx.data.get("s", 0))
    _log(ctx, "end")
    return os.getpid()

def tick(ctx):
    _log(ctx, "start")
    return ctx.id

def noop(ctx):
    return None

def big_progress(ctx):
    ctx.progress(a="x" * 5000)
    try:
        ctx.progress(b="y" * 5000)  # the merged record would pass its 8,000-byte bound
    except Exception as exc:
        return type(exc).__name__
    return "written"

def bad_result(ctx):
    return {"not json": object()}
"""


def write_handlers(directory: Path) -> None:
    (directory / "handlers_mod.py").write_text(textwrap.dedent(HANDLERS))


class Host:
    """One ``otpjobs worker`` process on its own admin port."""

    def __init__(
        self,
        workdir: Path,
        store: str,
        assignments: list[str],
        *,
        concurrency: int = 2,
        extra: list[str] | None = None,
        run_log: Path | None = None,
        name: str = "host",
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / f"{name}.log"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        if run_log is not None:
            env["RUN_LOG"] = str(run_log)
        cmd = [
            sys.executable,
            "-m",
            "actors",
            "worker",
            "--store",
            store,
            "--concurrency",
            str(concurrency),
            "--port",
            str(self.port),
            *(extra or []),
            *assignments,
        ]
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, cwd=workdir, env=env, stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.node_pgid: int | None = None
        self.node_entry: runtime.Entry | None = None

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_up(self, timeout: float = 30.0) -> "Host":
        """Wait until the pool's workers are up and the host has recorded its
        node (``worker_host_up`` follows the runtime file's record): the
        workers can be up first, and a node not found is not killed."""
        wait_until(
            lambda: ("workers_up" in (log := self.log()) and "worker_host_up" in log) or self.proc.poll() is not None,
            timeout,
            "workers_up and worker_host_up",
        )
        assert self.proc.poll() is None, f"host exited {self.proc.returncode}:\n{self.log()}"
        self._find_node()
        return self

    def _find_node(self) -> None:
        """The host's node, from its runtime file: the entry and its process group."""
        self.node_entry = runtime.examine(self.port)
        info = self.node_entry and self.node_entry.info
        self.node_pgid = info and info.get("pgid")

    def worker_pids(self) -> list[int]:
        """PIDs of the pool's worker processes (titled ``Worker ActorAddr-...``)."""
        out = []
        for pid in group_pids(self.node_pgid) if self.node_pgid else ():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"Worker ActorAddr"):
                    out.append(pid)
            except OSError:
                pass
        return out

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit status; nothing of the host is left after."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        """Kill whatever is left: the host's session and its actor system's group."""
        if self.node_pgid is None and self.proc.poll() is None:
            self._find_node()  # not waited for (or not yet recorded then)
        pids = [self.proc.pid] + ([self.node_pgid] if self.node_pgid else [])
        if self.node_entry is not None:
            runtime.kill_node_processes(self.node_entry)  # only processes proven to be the host's node
        kill_groups([self.proc], pids, "worker host")
        self.log_file.close()


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):  # noqa: ANN001
    return wait_until(predicate, timeout, what, step=0.02)


def run_ledger(path: Path) -> Callable[..., list[dict]]:
    """A reader of the handler runs a test's handlers log to ``path``, one
    JSON line each (a line cut short by a kill is skipped): ``read(event,
    job_id)`` the records of that event and job (None: any); ``read.path``."""

    def read(event: str | None = None, job_id: str | None = None) -> list[dict]:
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if (event is None or r["event"] == event) and (job_id is None or r["id"] == job_id):
                out.append(r)
        return out

    read.path = path  # type: ignore[attr-defined]
    return read
