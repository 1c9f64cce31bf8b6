"""Issue 27, item 4: stops. A node's pool drains like ``otpjobs worker`` on
SIGTERM and Ctrl-C, with no ``shutdown_error``; SIGKILL of the foreground
``otpjobs worker`` or ``otpjobs node start`` takes every process of its tree
down within a second or two: no host outlives its command.

The census after a kill counts every live process of the command's tree,
whatever its parent: those in the command's own session and in the session
its node's admin created (``/proc/<pid>/stat``), those holding the node's
runtime file (every forked actor), and those whose environment carries a
token the command was started with (exec'd helpers; forked actors rewrite
theirs with their process title).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from actors import jobs
from fdblayer.jobs.job import JobState
from supervision.procs import file_holders, proc_stat
from supervision.testing import marked_processes
from tests.procs import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
MARKER = "OTPJOBS_LIFETIME_TEST"

HANDLERS = '''
import json, os, time

def _log(ctx, event):
    with open(os.environ["RUN_LOG"], "a") as f:
        f.write(json.dumps({"id": ctx.id, "event": event, "pid": os.getpid(), "t": time.time()}) + "\\n")

def stubborn(ctx):
    """A 60 s job that sees the stop and carries on past any grace."""
    _log(ctx, "start")
    ctx.wait_stopping(60)
    _log(ctx, "stopping" if ctx.stopping else "end")
    time.sleep(60)
    return "late"

def checking(ctx):
    """A job that calls ctx.check() until it raises JobStopping."""
    _log(ctx, "start")
    try:
        while True:
            ctx.check()
            time.sleep(0.01)
    except BaseException:
        _log(ctx, "stopping")
        raise

def polite(ctx):
    """A 60 s job that returns as soon as it is told to stop."""
    _log(ctx, "start")
    ctx.wait_stopping(60)
    _log(ctx, "stopping" if ctx.stopping else "end")
    return "stopped" if ctx.stopping else "slept"
'''


class Command:
    """A foreground ``otpjobs`` command run as a user runs it, its whole tree marked with a token."""

    def __init__(self, workdir: Path, args: list[str], name: str, port: int) -> None:
        self.token = uuid.uuid4().hex
        self.runtime_file = workdir / "run" / f"node-{port}.json"
        self.sessions: set[int] = set()
        self.log_path = workdir / f"{name}.log"
        self.run_log = workdir / "runs.jsonl"
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            RUN_LOG=str(self.run_log),
            OTPJOBS_RUNTIME_DIR=str(workdir / "run"),
            THESPLOG_FILE=str(workdir / "thespian.log"),
        )
        env[MARKER] = self.token
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actors", *args],
            cwd=workdir,
            env=env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        wait_until(lambda: text in self.log() or self.proc.poll() is not None, timeout, text, step=0.02)
        assert text in self.log(), f"exited {self.proc.returncode}:\n{self.log()[-3000:]}"

    def tree(self) -> set[int]:
        """Every live process the command started (itself aside)."""
        found = set(marked_processes(self.token, MARKER))
        try:
            record = json.loads(self.runtime_file.read_text())
            st = os.stat(self.runtime_file)
            self.sessions.add(record["pgid"])
            found |= file_holders(st.st_dev, st.st_ino)
        except (OSError, ValueError, KeyError):
            pass  # no node (yet, or any more): its session is remembered
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = proc_stat(int(name))
                if st is not None and st.state not in ("Z", "X") and st.sid in self.sessions | {self.proc.pid}:
                    found.add(int(name))
        return found - {self.proc.pid, os.getpid()}

    def runs(self) -> list[dict]:
        if not self.run_log.exists():
            return []
        return [json.loads(line) for line in self.run_log.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        """Kill whatever is left (only processes carrying this command's token)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pid in self.tree():
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if pid in self.tree():  # still that process: the pidfd pins it
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                os.close(fd)
        self.log_file.close()


@pytest.fixture
def commands(workdir):
    (workdir / "lifetime_mod.py").write_text(textwrap.dedent(HANDLERS))
    started: list[Command] = []

    def run(args: list[str], name: str, port: int) -> Command:
        command = Command(workdir, args, name, port)
        started.append(command)
        return command

    yield run
    for command in started:
        command.close()


def start_node(commands, workdir: Path, store_url: str, handler: str, name: str = "node"):  # noqa: ANN001
    """``otpjobs node start`` with a pool of two workers running ``handler`` for type ``long``, grace 3 s."""
    path, port = workdir / "node.ini", free_port()
    path.write_text(
        f"[node]\nstore = {store_url}\nport = {port}\nhttp_port = 0\n"
        f"[workers]\nlong = lifetime_mod:{handler}\n[worker]\ngrace = 3\nconcurrency = 2\n"
    )
    return commands(["node", "start", "--config", str(path)], name, port)


def assert_tree_gone_within(command: Command, seconds: float) -> float:
    """The command's tree is empty within ``seconds`` of now; how long it took."""
    t0 = time.monotonic()
    left = command.tree()
    while left and time.monotonic() - t0 < seconds:
        time.sleep(0.02)
        left = command.tree()
    assert not left, f"still running {seconds} s after the kill: {sorted(left)}"
    return time.monotonic() - t0


# ------------------------------------------------------------ no host outlives its command
@pytest.mark.slow
def test_sigkill_of_otpjobs_worker_takes_its_whole_tree_down(commands, store_url, db):
    port = free_port()
    host = commands(
        ["worker", "long=lifetime_mod:stubborn", "--store", store_url, "--concurrency", "2", "--port", str(port)],
        "worker",
        port,
    )
    host.wait_for("workers_up")
    jobs.enqueue(db, "long", {})
    wait_until(host.runs, 20, "the job to start")
    tree = host.tree()
    assert len(tree) >= 6, f"admin, logger, supervisors, dispatcher, two workers: {sorted(tree)}"
    host.proc.send_signal(signal.SIGKILL)
    assert host.proc.wait(10) == -signal.SIGKILL
    took = assert_tree_gone_within(host, 3.0)
    assert took < 3.0


@pytest.mark.slow
def test_sigkill_of_otpjobs_node_start_takes_its_whole_tree_down(commands, workdir, store_url, db):
    node = start_node(commands, workdir, store_url, "stubborn")
    node.wait_for("workers_up")
    jobs.enqueue(db, "long", {})
    wait_until(node.runs, 20, "the job to start")
    tree = node.tree()
    assert len(tree) >= 15, f"a whole node, with its HTTP process and pool: {sorted(tree)}"
    node.proc.send_signal(signal.SIGKILL)
    assert node.proc.wait(10) == -signal.SIGKILL
    assert_tree_gone_within(node, 3.0)
    assert node.runtime_file.exists(), "left by the dead node"
    again = commands(["node", "start", "--config", str(workdir / "node.ini")], "again", 0)
    again.wait_for("node_up")  # the dead node's runtime file does not stand in the way
    assert "node_cleanup" in again.log() and "case=stale_dead" in again.log()
    again.proc.send_signal(signal.SIGTERM)
    assert again.proc.wait(60) == 0
    assert not node.runtime_file.exists()


# ------------------------------------------------------------ a node's pool drains
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_nodes_pool_drains_on_sigterm_and_ctrl_c_with_no_shutdown_error(commands, workdir, store_url, db, sig):
    node = start_node(commands, workdir, store_url, "stubborn")
    node.wait_for("workers_up")
    job_id = jobs.enqueue(db, "long", {})
    wait_until(node.runs, 20, "the 60 s job to start")
    t0 = time.monotonic()
    node.proc.send_signal(sig)
    assert node.proc.wait(60) == 0, node.log()[-3000:]
    took = time.monotonic() - t0
    assert 2.5 < took < 20, f"the handler had its 3 s grace, no more: {took:.1f} s"
    assert [r["event"] for r in node.runs()] == ["start", "stopping"], "it saw ctx.stopping"
    st = jobs.status(db, "long", job_id)
    assert st.state is JobState.PENDING and st.attempt == 0, "past the grace: back in the queue, uncounted"
    text = node.log()
    assert "node_drained" in text and "released=1" in text, text[-3000:]
    assert "shutdown_error" not in text, text[-3000:]
    # On a loaded machine a queue helper may outlast its shutdown timeout and be killed (a crash
    # line of a TypeMonitor): that is the queue tree's stop, not the pool's drain, checked here.
    errors = [line for line in text.splitlines() if " ERROR " in line and "actor=TypeMonitor" not in line]
    assert not errors, text[-3000:]
    assert_tree_gone_within(node, 5.0)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_to_every_process_of_the_node_drains_it_once(commands, workdir, store_url, db, sig):
    """systemd's default KillMode signals every process of the service at
    once: the node's processes leave the stop to the command, which drains as
    for a signal to it alone (before, each actor ended on its own, the drain
    timed out looking for the dispatcher and the job stayed running until
    its lease ran out)."""
    node = start_node(commands, workdir, store_url, "polite")
    node.wait_for("workers_up")
    job_id = jobs.enqueue(db, "long", {})
    wait_until(node.runs, 20, "the job to start")
    for pid in node.tree() | {node.proc.pid}:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    assert node.proc.wait(60) == 0, node.log()[-3000:]
    assert jobs.result(db, "long", job_id, timeout=1) == "stopped", "the handler was told to stop, and returned"
    text = node.log()
    assert "node_drained" in text and "node_drain_failed" not in text, text[-3000:]
    errors = [line for line in text.splitlines() if " ERROR " in line and "actor=TypeMonitor" not in line]
    assert not errors, "no process of the node ended on its own: " + "\n".join(errors)
    assert_tree_gone_within(node, 5.0)


@pytest.mark.slow
def test_a_handler_stopped_by_the_drain_is_put_back_unblamed(commands, workdir, store_url, db):
    """ctx.check() raises JobStopping when the host drains: that is the host's
    stop, not the job's failure, so the job goes back to the queue with its
    attempt not counted and no error, as if it had run past the grace."""
    node = start_node(commands, workdir, store_url, "checking")
    node.wait_for("workers_up")
    job_id = jobs.enqueue(db, "long", {}, max_attempts=1)
    wait_until(node.runs, 20, "the job to start")
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(60) == 0, node.log()[-3000:]
    assert [r["event"] for r in node.runs()] == ["start", "stopping"], "it raised JobStopping"
    st = jobs.status(db, "long", job_id)
    assert (st.state, st.attempt, st.error, st.errors) == (JobState.PENDING, 0, None, ()), st
    assert "job_released" in node.log() and "reason=stopped_by_drain" in node.log(), node.log()[-3000:]


@pytest.mark.slow
def test_a_handler_that_returns_when_told_keeps_its_result(commands, workdir, store_url, db):
    node = start_node(commands, workdir, store_url, "polite")
    node.wait_for("workers_up")
    job_id = jobs.enqueue(db, "long", {})
    wait_until(node.runs, 20, "the job to start")
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(60) == 0
    assert jobs.result(db, "long", job_id, timeout=1) == "stopped"
    assert "shutdown_error" not in node.log()


def test_a_host_name_is_unique_to_its_run_even_with_the_same_machine_and_pid():
    """Found by a review (session 31, 3 of 3 on SQLite, 2 of 2 on
    PostgreSQL): a host was named ``<machine>:<pid>``, which a container
    restarted with the same hostname gets again (its command is pid 1). The
    new run then resumed the killed run's drain from its status row and
    claimed nothing, ever; two such containers at once took back each
    other's running jobs (WorkerLost, run twice)."""
    import socket

    from actors.workers.host import host_name

    names = {host_name() for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith(f"{socket.gethostname()}:{os.getpid()}-") for n in names)
