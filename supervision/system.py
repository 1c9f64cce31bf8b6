"""Starting, reaching and stopping a node from a plain Python process.

A node is one Thespian ``multiprocTCPBase`` actor system whose only
top-level actor is a :class:`~supervision.registry.NodeSupervisor`. The
admin process daemonizes, so a node is recorded in its runtime file
(:mod:`supervision.runtime`: its processes with their start times, and a
lock that every process of the node holds), and

* :func:`start_node` first clears what a dead predecessor on the same port
  left behind (orphans holding the admin port) instead of hanging, killing
  only processes proven to be that node's: a file whose processes are gone
  or not ours is removed and nothing is signalled;
* a node dies with the process that started it (``die_with_owner``, the
  default): its node supervisor watches that process through a pidfd and
  kills the node's process group when it is gone, so a killed starter
  (``kill -9`` of ``otpjobs worker``) leaves nothing running;
* :func:`stop_node` stops the tree in order, then the actor system, then
  kills whatever is left of the node (proven as above);
* :func:`connect` never starts an actor system by accident: if no node
  answers on the port, or the node dies while it connects, it raises
  :class:`~supervision.exceptions.NodeDown`.

Everything binds 127.0.0.1 (see :mod:`supervision.loopback`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import loopback  # noqa: F401 - must patch Thespian before any ActorSystem
from . import drain  # noqa: F401 - likewise
from thespian.actors import ActorSystem, ActorSystemException  # noqa: E402
from thespian.system import multiprocCommon  # noqa: E402

from . import messages as m  # noqa: E402
from . import logs, runtime  # noqa: E402
from .childspec import SupFlags, check_specs  # noqa: E402
from .client import Client  # noqa: E402
from .exceptions import NodeDown, StartError, SupervisionError  # noqa: E402
from .procs import pid_alive, proc_stat, readable, start_time  # noqa: E402
from .registry import NodeSupervisor  # noqa: E402
from .runtime import read_runtime, runtime_dir, runtime_file  # noqa: E402,F401 - also imported from here
from .owner import StopCatcher, catching_stops, forking_node  # noqa: E402

log = logging.getLogger(__name__)

BASE = "multiprocTCPBase"
NODE_NAME = "supervision.node"
DEFAULT_PORT = 1900
DEFAULT_FLAGS = {"strategy": "one_for_one", "intensity": 3, "period": 10}

#: Older names, still imported by tests and benchmarks.
_runtime_file = runtime_file
_read_runtime = read_runtime


class NodeAlreadyRunning(SupervisionError):
    """A live node already answers on that port (or is starting there)."""


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_defs(level: int = logging.INFO, stream: str = "ext://sys.stderr") -> dict[str, Any]:
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
    entry: runtime.Entry | None = None  # its runtime file, as created

    def client(self) -> Client:
        """A client of this node (same process)."""
        return Client(self.system, self.port, self.address)

    def alive(self) -> bool:
        """True while the node supervisor's process runs."""
        return pid_alive(self.pid)

    def processes(self) -> set[int]:
        """Every live process of the node (those holding its runtime file)."""
        return runtime.node_processes(self.entry) if self.entry is not None else set()

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


def _live(entry: runtime.Entry) -> bool:
    """True if the node of a held runtime file still runs (or is starting)."""
    info = entry.info
    if info is None:
        return True  # unreadable while held: nothing is proven, nothing is done
    if not entry.up:
        return runtime.recorded_alive(info, "starter")
    if info.get("die_with_owner") and not runtime.recorded_alive(info, "owner"):
        return False
    return runtime.recorded_alive(info, "pid") and runtime.recorded_alive(info, "admin") and port_open(entry.port)


def cleanup_stale(port: int) -> bool:
    """Clear what a dead node left on ``port`` (per its runtime file).

    A node is stale when its node supervisor, its admin process or its
    admin port is gone, or the process that started it is (for a node that
    dies with it). What is
    done, logged as ``node_cleanup port=... case=...``:

    * ``stale_killed``: processes of the node are left: each process proven
      to be the node's (see :func:`supervision.runtime.kill_node_processes`)
      is killed, then the file removed;
    * ``stale_dead``: no process of the node is left (its lock is free) and
      the pids it names are unused: the file is removed;
    * ``not_ours``: no process of the node is left, and the pids or process
      group it names belong to other processes now: the file is removed and
      they are left alone;
    * ``not_a_file``: a symlink or other non-file in its place is removed
      (never followed).

    Returns True if something was cleared. A live node is left alone (see
    NodeAlreadyRunning in start_node).

    Raises:
        RuntimeDirError: the runtime directory is not private.
    """
    entry = runtime.examine(port)
    if entry is None:
        return False
    if not entry.regular:
        runtime.remove(entry)
        log.warning("node_cleanup port=%s case=not_a_file path=%s killed=0", port, entry.path)
        return True
    if not entry.held:
        case = "not_ours" if runtime.strangers(entry.record) else "stale_dead"
        if not runtime.remove(entry):
            return False
        log.info("node_cleanup port=%s case=%s killed=0 %s", port, case, runtime.describe(entry.record))
        return True
    if _live(entry):
        return False
    info = entry.info or {}
    spare = [info[k] for k in ("owner", "starter") if runtime.recorded_alive(entry.info, k)]
    killed = runtime.kill_node_processes(entry, spare=spare)
    runtime.remove(entry)
    _wait_port_closed(port, 10.0)
    log.info("node_cleanup port=%s case=stale_killed killed=%d %s", port, len(killed), runtime.describe(entry.record))
    return True


def start_node(
    port: int = DEFAULT_PORT,
    flags: Any = None,
    specs: list[Any] | None = None,
    *,
    level: int = logging.INFO,
    log_stream: str = "ext://sys.stderr",
    log_config: dict[str, Any] | None = None,
    timeout: float = 60.0,
    die_with_owner: bool = True,
) -> Node:
    """Start a node whose node supervisor runs ``specs`` under ``flags``.

    ``log_config`` (a ``logging.config.dictConfig`` dict, applied in the
    node's logger process, and in each actor process when its handlers may
    be opened there too: see :mod:`supervision.logs`) replaces the default
    one line per record to ``log_stream`` at ``level``. With ``die_with_owner`` (the default) the
    node is killed whole as soon as this process ends, however it ends;
    without it the node outlives this process until ``stop_node``.

    Raises:
        BadChildSpec: malformed flags or specs (checked before anything starts).
        RuntimeDirError: the runtime directory is not private (nothing is
            created or signalled).
        NodeAlreadyRunning: a live node answers on ``port``, or one is starting there.
        NodeDown: the port is held by something that is not a node.
        StartError: a child failed to start (nothing is left running).
    """
    flags = SupFlags.from_value(flags if flags is not None else DEFAULT_FLAGS)
    specs = check_specs(flags, list(specs or []))
    cleanup_stale(port)
    if port_open(port):
        if read_runtime(port):
            raise NodeAlreadyRunning(f"a node already runs on 127.0.0.1:{port}")
        raise NodeDown(port, "the port is in use by another program")
    record = runtime.owner_record(die_with_owner)
    try:
        fd = runtime.claim(port, record)  # before the fork: every process of the node inherits its lock
    except FileExistsError:
        raise NodeAlreadyRunning(f"a node is starting on 127.0.0.1:{port}") from None
    try:
        node = _start(port, flags, specs, record, log_config or log_defs(level, log_stream), timeout)
        info = dict(
            record,
            port=port,
            pid=node.pid,
            pid_start=start_time(node.pid),
            admin_pid=node.admin_pid,
            admin_start=start_time(node.admin_pid),
            pgid=node.pgid,
        )
        runtime.write(fd, info)
        node.entry = runtime.examine(port)
    except BaseException:
        os.close(fd)
        entry = runtime.examine(port)
        if entry is not None and entry.regular:
            runtime.kill_node_processes(entry, timeout=5.0)
            runtime.remove(entry)
        raise
    os.close(fd)  # the node's processes hold it now
    return node


def _start(
    port: int, flags: SupFlags, specs: list[Any], record: dict[str, Any], log_config: dict[str, Any], timeout: float
) -> Node:
    owner = (record["owner"], record["owner_start"]) if record["die_with_owner"] else None
    # the admin and the logger leave stop signals to this process, and die with
    # it; every actor process of the node writes its own log lines (see logs)
    with forking_node(owner), logs.inherited(log_config):
        system = ActorSystem(BASE, {"Admin Port": port}, logDefs=log_config, transientUnique=True)
    try:
        address = system.createActor(NodeSupervisor, globalName=NODE_NAME)
        init = m.Init((flags, specs, owner), None, None, None, NODE_NAME)
        answer = system.ask(address, init, timeout)
        if not isinstance(answer, m.Started):
            reason = answer.reason if isinstance(answer, m.StartFailed) else f"no answer in {timeout}s"
            raise StartError(NODE_NAME, reason)
    except BaseException:
        system.shutdown()
        _wait_port_closed(port, 5.0)
        raise
    st = proc_stat(answer.pid)
    admin_pid = st.ppid if st is not None else 0
    return Node(port, system, address, answer.pid, admin_pid, os.getpgid(admin_pid))


class _NoAdmin(Exception):
    """A client's ActorSystem found no admin where its checks had seen one."""


#: Set in a thread while it only connects: Thespian's ``ActorSystem()``
#: starts a new admin wherever it finds none (see THESPIAN.md), so a node
#: that dies between :func:`connect`'s checks and its ``ActorSystem()``
#: would be replaced by an empty actor system left running for ever.
_connecting = threading.local()
_start_admin = multiprocCommon.multiprocessCommon._startAdmin


def _start_admin_unless_connecting(self: Any, *args: Any, **kwargs: Any) -> Any:
    if getattr(_connecting, "on", False):
        raise _NoAdmin()
    return _start_admin(self, *args, **kwargs)


multiprocCommon.multiprocessCommon._startAdmin = _start_admin_unless_connecting


def connect(port: int = DEFAULT_PORT, timeout: float = 10.0) -> Client:
    """A client of the node on ``port``.

    Raises:
        NodeDown: no node answers there (no actor system is started).
        RuntimeDirError: the runtime directory is not private.
    """
    if not port_open(port):
        raise NodeDown(port)
    entry = runtime.examine(port)
    # A file whose lock is free is a dead node's leftover (a SIGKILLed node
    # removes nothing): it says nothing of who listens on the port now.
    info = entry.info if entry is not None and entry.held else None
    if info is not None and "admin_pid" in info and not runtime.recorded_alive(info, "admin"):
        raise NodeDown(port, "the node's admin process is gone")
    _connecting.on = True
    try:
        system = ActorSystem(BASE, {"Admin Port": port}, transientUnique=True)
    except _NoAdmin:
        raise NodeDown(port, "the node stopped as it was reached") from None
    except ActorSystemException as exc:
        raise NodeDown(port, str(exc)) from None
    finally:
        _connecting.on = False
    return Client(system, port, None)


def stop_node(port: int = DEFAULT_PORT, timeout: float = 30.0) -> bool:
    """Stop the node on ``port``: ordered shutdown, then kill what is left of it.

    Only processes proven to be the node's are killed (see
    :func:`supervision.runtime.kill_node_processes`). Returns once the admin
    port is free again (a ``start_node`` on it can follow at once); False if
    no node was running there.

    Raises:
        RuntimeDirError: the runtime directory is not private.
    """
    entry = runtime.examine(port)
    if not port_open(port):
        if entry is not None:
            cleanup_stale(port)
        return False
    try:
        client = connect(port)
    except NodeDown:
        cleanup_stale(port)
        return False
    try:
        if entry is None or entry.info is None or runtime.recorded_alive(entry.info, "pid"):
            # Not once the node supervisor is gone: looking it up by its global
            # name would start a new, uninitialized one and wait for its pid.
            client.shutdown_tree(timeout=timeout)
        client.system.shutdown()
    finally:
        if entry is not None and entry.regular:
            runtime.kill_node_processes(entry)
            _remove_when_released(entry, 5.0)
        _wait_port_closed(port, 5.0)
    return True


def _remove_when_released(entry: Any, timeout: float) -> bool:
    """Remove the runtime file once its lock is free: a process that is
    exiting holds it until the kernel has closed its descriptors."""
    deadline = time.monotonic() + timeout
    while True:
        if runtime.remove(entry) or not entry.path.exists():
            return True
        if time.monotonic() >= deadline:
            log.warning("node_cleanup port=%s case=still_locked (the file stays; the next start clears it)", entry.port)
            return False
        time.sleep(0.02)


def wait_for_stop(node: Node, caught: StopCatcher | None = None) -> str:
    """Block until SIGTERM or SIGINT arrives (its name is returned) or the
    node supervisor's process ends (``"supervisor_exited"``).

    ``caught``: the signals caught since before the node started
    (:func:`supervision.owner.catching_stops`); one caught already is
    returned at once. For a foreground command that runs a node: call it
    from the main thread.
    """
    if caught is None:
        with catching_stops() as mine:
            return wait_for_stop(node, mine)
    try:
        pidfd = os.pidfd_open(node.pid)
    except ProcessLookupError:
        pidfd = None
    try:
        while not caught.received and pidfd is not None:
            ready = readable([caught.fd, pidfd])
            if not caught.received and pidfd in ready:
                return "supervisor_exited"
        return caught.received[0] if caught.received else "supervisor_exited"
    finally:
        if pidfd is not None:
            os.close(pidfd)
