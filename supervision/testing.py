"""Fault injection for tests of supervision trees: real nodes, real signals.

Principle: a test starts its tree as a real node (``running_node``), hurts
it the way production does (SIGKILL of an actor's process, ``exit/2`` with
a reason, restart storms), and asserts on what the supervisors did, read
from their own reports (``events()``), not from sleeps and hope. At the
end the node is stopped in order, and any process of it still alive is
killed and reported (``LeakedProcesses``): a test never leaves strays.

Usage::

    from supervision import ChildSpec
    from supervision.testing import running_node

    def test_the_counter_comes_back():
        spec = ChildSpec("counter", "myapp.counter:Counter", name="counter")
        with running_node([spec]) as node:
            old = node.pid("counter")
            node.kill("counter")
            new = node.wait_restarted("counter", old)
            assert new != old and node.call("counter", "get") == 0

With pytest, the ``otp_node`` fixture (registered through the ``pytest11``
entry point, so installing the package is enough) is a factory with the
same arguments whose nodes are stopped after the test.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, List, cast

from .exceptions import SupervisionError
from .system import Node, start_node

__all__ = ["running_node", "NodeHandle", "LeakedProcesses", "JsonReports", "free_port", "marked_processes", "cmdline"]

#: Environment variable every process of a test node inherits (with a token
#: of its own): how leaked processes are found, even ones that left the group.
MARKER = "SUPERVISION_TEST_NODE"


class LeakedProcesses(AssertionError):
    """Processes of a test node survived its stop (they were killed; pids listed)."""


class JsonReports(logging.Formatter):
    """One JSON object per supervision report (``event`` and its fields)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "report", None)
        if not isinstance(fields, dict):
            fields = {"event": "log", "message": record.getMessage()}
        return json.dumps({**fields, "time": record.created, "reporter_pid": record.process}, default=repr)


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return cast(int, sock.getsockname()[1])


def _log_config(path: Path, level: int) -> dict[str, Any]:
    return {
        "version": 1,
        "formatters": {
            "json": {"()": "supervision.testing.JsonReports"},
            "line": {"format": "%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s"},
        },
        "handlers": {
            "reports": {
                "class": "logging.FileHandler",
                "filename": str(path),
                "formatter": "json",
                "level": logging.DEBUG,
            },
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "line",
                "stream": "ext://sys.stderr",
                "level": level,
            },
        },
        "loggers": {"supervision": {"handlers": ["reports"], "level": logging.DEBUG}},
        "root": {"handlers": ["stderr"], "level": level},
    }


class NodeHandle:
    """A running test node: calls, faults and the supervisors' reports.

    Names are registered names (``ChildSpec(name=...)``) or addresses.
    """

    def __init__(self, node: Node, reports: Path, token: str) -> None:
        self.node = node
        self.port = node.port
        self.client = node.client()
        self._reports = reports
        self._token = token

    # ------------------------------------------------------------ talking
    def call(self, name: Any, msg: Any, timeout: float = 5.0) -> Any:
        """``gen_server:call``: the reply, or the error the actor answered."""
        return self.client.call(name, msg, timeout)

    def cast(self, name: Any, msg: Any) -> None:
        """``gen_server:cast``."""
        self.client.cast(name, msg)

    def pid(self, name: Any, timeout: float = 5.0) -> int:
        """The OS process of a registered child."""
        return self.client.get_pid(name, timeout)

    def which_children(self, sup: Any = None) -> list[Any]:
        """A supervisor's children (the node supervisor's by default)."""
        return self.client.which_children(sup if sup is not None else self.node.address)

    def advance(self, name: Any, seconds: float) -> float:
        """Move the manual clock of a child started with ``clock="manual"``;
        returns once the timers it made due have run (the clock's new time)."""
        return self.client.advance_clock(name, seconds)

    # ------------------------------------------------------------ faults
    def kill(self, name: Any, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to the child's OS process; returns that pid.

        Raises:
            AssertionError: that pid is not a process of this node (any more).
        """
        pid = self.pid(name)
        if not _signal_if(pid, sig, lambda: pid in self.node.processes()):
            raise AssertionError(f"{name!r} (pid {pid}) is not a process of the test node any more")
        return pid

    def exit(self, name: Any, reason: Any) -> None:
        """``erlang:exit/2``: the actor exits with ``reason`` (one that traps
        exits gets it as a message; ``"kill"`` is a SIGKILL, reported as
        ``killed``, which nothing traps)."""
        if reason == "kill":
            self.kill(name)
        else:
            self.client.exit(name, reason)

    def wait_restarted(self, name: Any, old_pid: int, timeout: float = 5.0) -> int:
        """Wait until ``name`` runs in another process than ``old_pid``.

        Returns:
            The new pid.

        Raises:
            AssertionError: naming what the supervisors reported instead (the
                child exited and was not restarted, a supervisor gave up...).
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(SupervisionError):
                pid = self.pid(name, timeout=max(0.2, min(1.0, deadline - time.monotonic())))
                if pid != old_pid:
                    return pid
            time.sleep(0.02)
        raise AssertionError(
            f"{name!r} was not restarted within {timeout} s (its old pid {old_pid}); "
            f"the supervisors reported: {self._story()}"
        )

    def _story(self) -> str:
        told = [
            e
            for e in self.events()
            if e.get("event") in ("child_exited", "child_restarted", "max_intensity", "start_error", "shutdown_error")
        ]
        if not told:
            return "nothing"
        return "; ".join(
            " ".join(f"{k}={v}" for k, v in e.items() if k not in ("time", "reporter_pid")) for e in told[-6:]
        )

    # ------------------------------------------------------------ what happened
    def events(self) -> List[dict[str, Any]]:
        """The supervision reports so far, in order: dicts with ``event`` and
        the report's fields (``supervisor``, ``child``, ``reason``, ``pid``...:
        literals as values, other objects as their ``repr``), plus ``time``
        and ``reporter_pid`` (the process that logged it)."""
        if not self._reports.exists():
            return []
        out = []
        for line in self._reports.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        for event in out:
            for key, value in event.items():
                if key != "event" and isinstance(value, str):
                    event[key] = _unrepr(value)
        return out

    def wait_event(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0, what: str = "an event"
    ) -> dict[str, Any]:
        """The first report for which ``predicate`` is true, waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events():
                if predicate(event):
                    return event
            if time.monotonic() > deadline:
                raise AssertionError(f"no report of {what} within {timeout} s; got: {self._story()}")
            time.sleep(0.02)

    def alive(self) -> bool:
        """True while the node supervisor runs (False once the root gave up)."""
        return self.node.alive()


def _unrepr(text: str) -> Any:
    """Fields travel as their ``repr``: literals (strings, numbers, tuples)
    come back as values, anything else (an exception) stays its repr."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


@contextlib.contextmanager
def running_node(
    specs: list[Any], flags: Any = None, *, level: int = logging.WARNING, timeout: float = 60.0
) -> Iterator[NodeHandle]:
    """Start a node running ``specs`` under ``flags`` on a free loopback port,
    with its runtime files in a temporary directory; stop it at the end and
    remove the directory.

    Raises:
        LeakedProcesses: at the end, if any process of the node outlived the
            ordered stop (they are killed first).
        BadChildSpec, StartError: as ``start_node``.
    """
    directory = Path(tempfile.mkdtemp(prefix="supervision-test-"))
    token = uuid.uuid4().hex
    saved = {k: os.environ.get(k) for k in ("OTPJOBS_RUNTIME_DIR", MARKER)}
    os.environ["OTPJOBS_RUNTIME_DIR"] = str(directory)
    os.environ[MARKER] = token
    node = None
    try:
        node = start_node(
            free_port(), flags, specs, log_config=_log_config(directory / "reports.jsonl", level), timeout=timeout
        )
        os.environ[MARKER] = ""  # this process's later children are not the node's
        yield NodeHandle(node, directory / "reports.jsonl", token)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        try:
            if node is not None:
                _stop_and_check(node, token)
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def _stop_and_check(node: Node, token: str) -> None:
    """Ordered stop; then every process of the node must be gone: those
    holding its runtime file (every process forked in it) and those carrying
    the token (every program started below it)."""
    if node.alive():  # a root that gave up left no tree to stop (and asking would wait for one)
        with contextlib.suppress(Exception):
            node.client().shutdown_tree(timeout=30)
    with contextlib.suppress(Exception):
        node.system.shutdown()

    def census() -> set[int]:
        return set(marked_processes(token)) | node.processes()

    deadline = time.monotonic() + 5
    survivors = census()
    while survivors and time.monotonic() < deadline:
        time.sleep(0.05)
        survivors = census()
    if not survivors:
        return
    described = [f"{pid} ({cmdline(pid)})" for pid in sorted(survivors)]
    for pid in survivors:
        _signal_if(pid, signal.SIGKILL, lambda: pid in census())
    deadline = time.monotonic() + 5
    while census() and time.monotonic() < deadline:  # gone (or a zombie) before we say so
        time.sleep(0.02)
    raise LeakedProcesses(
        f"the test node on port {node.port} left {len(survivors)} process(es) "
        f"running after its stop (killed now): {', '.join(described)}"
    )


def _signal_if(pid: int, sig: int, is_ours: Callable[[], bool]) -> bool:
    """Send ``sig`` to ``pid`` if ``is_ours()``, asked once a pidfd pins the
    process: a pid handed to another process meanwhile is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if not is_ours():
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def marked_processes(token: str, marker: str = MARKER) -> List[int]:
    """Live processes (zombies aside, this one aside) whose environment has
    ``marker=token``: every process started below one that set it."""
    needle = f"{marker}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    """A process's command line, shortened, for a report ("?" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"
