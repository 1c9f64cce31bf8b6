"""Starting, reaching and stopping a node from a plain Python process.

A node is one Thespian ``multiprocTCPBase`` actor system whose only
top-level actor is a :class:`~supervision.registry.NodeSupervisor`. The
admin process daemonizes, so a node records its processes in a runtime
file (``<runtime dir>/node-<port>.json``: admin pid and process group) and

* :func:`start_node` first removes what a SIGKILLed predecessor on the same
  port left behind (orphans holding the admin port) instead of hanging;
* :func:`stop_node` stops the tree in order, then the actor system, then
  kills whatever is left in the node's process group;
* :func:`connect` never starts an actor system by accident: if no node
  answers on the port it raises :class:`~supervision.exceptions.NodeDown`.

Everything binds 127.0.0.1 (see :mod:`supervision.loopback`).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import loopback  # noqa: F401 - must patch Thespian before any ActorSystem
from thespian.actors import ActorSystem, ActorSystemException  # noqa: E402

from . import messages as m  # noqa: E402
from .childspec import SupFlags, check_specs  # noqa: E402
from .client import Client  # noqa: E402
from .exceptions import NodeDown, StartError, SupervisionError  # noqa: E402
from .registry import NodeSupervisor, pid_alive  # noqa: E402

log = logging.getLogger(__name__)

BASE = "multiprocTCPBase"
NODE_NAME = "supervision.node"
DEFAULT_PORT = 1900
DEFAULT_FLAGS = {"strategy": "one_for_one", "intensity": 3, "period": 10}


class NodeAlreadyRunning(SupervisionError):
    """A live node already answers on that port."""


def runtime_dir() -> Path:
    """Where runtime files live: ``$OTPJOBS_RUNTIME_DIR`` or a per-user temp dir."""
    path = Path(os.environ.get("OTPJOBS_RUNTIME_DIR") or Path(tempfile.gettempdir()) / f"otpjobs-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _runtime_file(port: int) -> Path:
    return runtime_dir() / f"node-{port}.json"


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_defs(level: int = logging.INFO, stream: str = "ext://sys.stderr") -> dict:
    """Logging config for the actor system: one line per record, to ``stream``."""
    return {
        "version": 1,
        "formatters": {"line": {"format": "%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s"}},
        "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "line", "stream": stream, "level": level}},
        "root": {"handlers": ["h"], "level": level},
    }


@dataclass
class Node:
    """A node started by this process."""

    port: int
    system: ActorSystem
    address: Any
    pid: int
    admin_pid: int
    pgid: int

    def client(self) -> Client:
        """A client of this node (same process)."""
        return Client(self.system, self.port, self.address)

    def alive(self) -> bool:
        """True while the node supervisor's process runs."""
        return pid_alive(self.pid)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the tree in order, then every process of the node."""
        stop_node(self.port, timeout=timeout)


def _wait_port_closed(port: int, timeout: float) -> bool:
    """Wait until nothing accepts on the admin port (an exiting admin keeps
    accepting for a moment); True if it closed within ``timeout``."""
    deadline = time.monotonic() + timeout
    while port_open(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def cleanup_stale(port: int) -> bool:
    """Kill what a dead node left on ``port`` (per its runtime file).

    A node is stale when the process that started it, its node supervisor
    or its admin port is gone: its whole process group is killed. Returns
    True if something was cleaned up. A live node is left alone (see
    NodeAlreadyRunning in start_node).
    """
    info = _read_runtime(port)
    if info is None:
        return False
    if pid_alive(info.get("owner")) and pid_alive(info.get("pid")) and port_open(port):
        return False
    _kill_group(info)
    _runtime_file(port).unlink(missing_ok=True)
    _wait_port_closed(port, 10.0)
    log.info("node_cleanup port=%s pgid=%s", port, info.get("pgid"))
    return True


def _read_runtime(port: int) -> dict | None:
    try:
        return json.loads(_runtime_file(port).read_text())
    except (FileNotFoundError, ValueError):
        return None


def _kill_group(info: dict) -> None:
    pgid = info.get("pgid")
    if not pgid or pgid == os.getpgid(0):
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_node(port: int = DEFAULT_PORT, flags: Any = None, specs: list | None = None, *,
               level: int = logging.INFO, log_stream: str = "ext://sys.stderr",
               log_config: dict | None = None, timeout: float = 60.0) -> Node:
    """Start a node whose node supervisor runs ``specs`` under ``flags``.

    ``log_config`` (a ``logging.config.dictConfig`` dict, applied in the
    node's logger process) replaces the default one line per record to
    ``log_stream`` at ``level``.

    Raises:
        BadChildSpec: malformed flags or specs (checked before anything starts).
        NodeAlreadyRunning: a live node answers on ``port``.
        NodeDown: the port is held by something that is not a node.
        StartError: a child failed to start (nothing is left running).
    """
    flags = SupFlags.from_value(flags if flags is not None else DEFAULT_FLAGS)
    specs = check_specs(flags, list(specs or []))
    cleanup_stale(port)
    if port_open(port):
        if _read_runtime(port):
            raise NodeAlreadyRunning(f"a node already runs on 127.0.0.1:{port}")
        raise NodeDown(port, "the port is in use by another program")
    system = ActorSystem(BASE, {"Admin Port": port}, logDefs=log_config or log_defs(level, log_stream),
                         transientUnique=True)
    try:
        address = system.createActor(NodeSupervisor, globalName=NODE_NAME)
        init = m.Init((flags, specs), None, None, None, NODE_NAME)
        answer = system.ask(address, init, timeout)
        if not isinstance(answer, m.Started):
            reason = answer.reason if isinstance(answer, m.StartFailed) else f"no answer in {timeout}s"
            raise StartError(NODE_NAME, reason)
    except BaseException:
        system.shutdown()
        _wait_port_closed(port, 5.0)
        raise
    admin_pid = _ppid(answer.pid)
    node = Node(port, system, address, answer.pid, admin_pid, os.getpgid(admin_pid))
    _runtime_file(port).write_text(json.dumps(
        {"pid": node.pid, "admin_pid": admin_pid, "pgid": node.pgid, "owner": os.getpid()}))
    return node


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def connect(port: int = DEFAULT_PORT, timeout: float = 10.0) -> Client:
    """A client of the node on ``port``.

    Raises:
        NodeDown: no node answers there (no actor system is started).
    """
    if not port_open(port):
        raise NodeDown(port)
    info = _read_runtime(port)
    if info is not None and not pid_alive(info.get("admin_pid")):
        raise NodeDown(port, "the node's admin process is gone")
    try:
        system = ActorSystem(BASE, {"Admin Port": port}, transientUnique=True)
    except ActorSystemException as exc:
        raise NodeDown(port, str(exc)) from None
    return Client(system, port, None)


def stop_node(port: int = DEFAULT_PORT, timeout: float = 30.0) -> bool:
    """Stop the node on ``port``: ordered shutdown, then kill its process group.

    Returns once the admin port is free again (a ``start_node`` on it can
    follow at once); False if no node was running there.
    """
    info = _read_runtime(port)
    if not port_open(port):
        if info:
            _kill_group(info)
            _runtime_file(port).unlink(missing_ok=True)
        return False
    try:
        client = connect(port)
    except NodeDown:
        cleanup_stale(port)
        return False
    try:
        if info is None or pid_alive(info.get("pid")):
            # Not once the node supervisor is gone: looking it up by its global
            # name would start a new, uninitialized one and wait for its pid.
            client.shutdown_tree(timeout=timeout)
        client.system.shutdown()
    finally:
        if info:
            _kill_group(info)
        _runtime_file(port).unlink(missing_ok=True)
        _wait_port_closed(port, 5.0)
    return True
