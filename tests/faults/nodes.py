"""A real node under test, and views of its supervision tree and processes.

:class:`CliNode` runs ``python -m actors node start`` in its own session,
as a user does, on a fixed admin port so a killed node can be started
again on the same port (its successor cleans up what it left). Its log
file collects every incarnation.

:func:`walk` lists every supervised actor of a node (which_children from
the node supervisor down, with OS pids), :func:`snapshot` adds the
processes that are not supervised children (the Thespian admin and
logger, each notifier's linked type monitor, the HTTP process), and
:meth:`Snapshot.strays` names the processes of the node's group that
belong to none of them: orphans of a killed parent, or a zombie its
parent does not reap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervision import NodeDown, connect
from tests.procs import group_pids, pid_alive, proc_stat, wait_until

ROOT = Path(__file__).resolve().parents[2]

#: Restart intensity of the product's supervisors that restart children, by
#: class (actors.node.root.ROOT_FLAGS, actors.queue.sup.JobsSup, actors.scheduler.sup.SchedulerTree).
INTENSITY = {"NodeSupervisor": (3, 10.0), "JobsSup": (3, 10.0), "SchedulerTree": (10, 1.0)}
#: Their names in the node's ``child_exited supervisor=...`` lines.
LOG_NAME = {"supervision.node": "NodeSupervisor", "couch_jobs.sup": "JobsSup", "None": "SchedulerTree"}


def snake(name: str) -> str:
    """ActivityMonitor -> activity_monitor."""
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


@dataclass(frozen=True)
class Proc:
    """A process of a node's group, as /proc shows it (Thespian titles each
    actor process with its class)."""

    pid: int
    ppid: int
    cls: str  # the actor class, "MultiProcAdmin", "logger", or "http_main"
    ancestors: tuple  # classes of its parents, nearest first
    age: float = 0.0  # seconds since it started

    @property
    def role(self) -> str:
        return "http_process" if self.cls == "http_main" else snake(self.cls)


def proc_tree(pgid: int) -> list[Proc]:
    """The live processes of a node's group with their classes (no actor call:
    it works while the tree restarts)."""
    raw: dict[int, tuple[int, str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    for pid in group_pids(pgid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").split()
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if not cmd:
            continue
        cls = "http_main" if "actors.http.main" in cmd else cmd[0]
        raw[pid] = (int(fields[1]), cls, uptime - int(fields[19]) / tick)
    out = []
    for pid, (ppid, cls, age) in raw.items():
        chain, parent = [], ppid
        while parent in raw and len(chain) < 20:
            chain.append(raw[parent][1])
            parent = raw[parent][0]
        out.append(Proc(pid, ppid, cls, tuple(chain), age))
    return out


@dataclass(frozen=True)
class Actor:
    """One supervised actor: its path of child ids from the node supervisor."""

    path: tuple
    addr: Any
    pid: int
    kind: str  # "supervisor" or "worker"
    start: str

    @property
    def role(self) -> str:
        """What the actor is (its child id; simple_one_for_one children by module)."""
        if not self.path:
            return "node_supervisor"
        last = self.path[-1]
        if isinstance(last, str):
            return last
        return snake(self.start.rsplit(":", 1)[-1])


@dataclass
class Snapshot:
    """The tree and the node's other processes at one moment."""

    actors: list[Actor]
    absent: set  # paths of static children without a process (ignored ones)
    extras: dict[int, str]  # pid -> role of processes that are not supervised children
    group: set = field(default_factory=set)

    def pids(self) -> set[int]:
        return {a.pid for a in self.actors} | set(self.extras)

    def by_role(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for a in self.actors:
            out.setdefault(a.role, []).append(a.pid)
        for pid, role in self.extras.items():
            out.setdefault(role, []).append(pid)
        return out

    def kids(self, path: tuple) -> list[Actor]:
        """Children (with a process) of the supervisor at ``path``."""
        return [a for a in self.actors if a.path[:-1] == path and len(a.path) == len(path) + 1]


def walk(client: Any) -> tuple[list[Actor], set]:
    """Every supervised actor with a process, and the static children without one."""
    root = client.node
    actors = [Actor((), root, client.get_pid(root), "supervisor", "supervision.registry:NodeSupervisor")]
    absent: set = set()

    def visit(sup: Any, path: tuple) -> None:
        for index, row in enumerate(client.which_children(sup)):
            child = path + (row.id if row.id is not None else index,)
            if row.addr is None:
                absent.add(child)
                continue
            pid = row.pid if row.pid is not None else client.get_pid(row.addr)
            actors.append(Actor(child, row.addr, pid, row.type, row.start))
            if row.type == "supervisor":
                visit(row.addr, child)

    visit(root, ())
    return actors, absent


def _children_in(group: set[int], parent: int) -> list[int]:
    out = []
    for pid in group:
        st = proc_stat(pid)
        if st and st[1] == parent:
            out.append(pid)
    return out


def snapshot(client: Any, admin_pid: int, pgid: int) -> Snapshot:
    """The tree plus the unsupervised processes that belong to it."""
    actors, absent = walk(client)
    group = group_pids(pgid)
    extras = {admin_pid: "admin"}
    root_pid = actors[0].pid
    for pid in _children_in(group, admin_pid):
        if pid != root_pid:
            extras[pid] = "logger"
    for a in actors:
        if a.role == "notifier":
            for pid in _children_in(group, a.pid):
                extras[pid] = "type_monitor"
        elif a.role == "http_server":
            for pid in _children_in(group, a.pid):
                extras[pid] = "http_process"
    return Snapshot(actors, absent, extras, group)


def strays(client: Any, admin_pid: int, pgid: int) -> set[int]:
    """Live processes of the node's group that belong to no part of the tree,
    and zombies whose parent (in the group) does not reap them.

    The tree is walked before and after the group is read, so a process
    started in between is not taken for a stray.
    """
    before = snapshot(client, admin_pid, pgid)
    group = group_pids(pgid)
    after = snapshot(client, admin_pid, pgid)
    known = before.pids() | after.pids()
    out = {pid for pid in group if pid not in known and pid_alive(pid)}
    return out | unreaped_zombies(pgid)


def unreaped_zombies(pgid: int) -> set[int]:
    """Zombies of the group whose parent is a live process of the same group."""
    out = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st and st[2] == pgid and st[0] == "Z":
            parent = proc_stat(st[1])
            if parent and parent[2] == pgid and parent[0] not in ("Z", "X"):
                out.add(int(name))
    return out


def describe(pids: set[int]) -> list[str]:
    """``pid ppid state cmdline`` of each pid (for failure messages)."""
    out = []
    for pid in sorted(pids):
        st = proc_stat(pid)
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
        except OSError:
            cmd = "?"
        out.append(f"{pid} ppid={st[1] if st else '?'} state={st[0] if st else 'gone'} {cmd}")
    return out


class CliNode:
    """``python -m actors node start`` on ``port`` in its own session.

    Args:
        workdir: holds the config file, the runtime files and the log.
        config: INI text (the [couch_jobs] and [replicator] values).
    """

    def __init__(self, store_url: str, port: int, workdir: Path, config: str, log_level: str = "info") -> None:
        self.store_url = store_url
        self.port = port
        self.workdir = workdir
        self.config_path = workdir / "node.ini"
        self.config_path.write_text(config)
        self.log_path = workdir / "node.log"
        self.log_level = log_level
        self.env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            OTPJOBS_RUNTIME_DIR=str(workdir),
            THESPLOG_FILE=str(workdir / "thespian.log"),
        )
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.client: Any = None
        #: every process group a node of this port ever had (checked empty at the end)
        self.pgids: set[int] = set()
        self.incarnations = 0

    @property
    def pgid(self) -> int:
        return self.info["pgid"]

    @property
    def admin_pid(self) -> int:
        return self.info["admin_pid"]

    def start(self, timeout: float = 90.0) -> "CliNode":
        """Start the node and wait until its tree is up and a client is connected."""
        runtime = self.workdir / f"node-{self.port}.json"
        with open(self.log_path, "a") as log:
            log.write(f"---- test: starting node incarnation {self.incarnations + 1}\n")
            log.flush()
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "actors",
                    "node",
                    "start",
                    "--store",
                    self.store_url,
                    "--port",
                    str(self.port),
                    "--config",
                    str(self.config_path),
                    "--log-level",
                    self.log_level,
                    "--http-port",
                    "0",
                ],
                cwd=str(ROOT),
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = self.proc

        def started() -> dict | None:
            if proc.poll() is not None:
                raise AssertionError(f"node exited {proc.returncode} at start: {self.log_tail()}")
            try:
                info = json.loads(runtime.read_text())
            except (FileNotFoundError, ValueError):
                return None
            return info if "pgid" in info and info.get("owner") == proc.pid else None

        self.info = wait_until(started, timeout, "the node to start", step=0.05)
        self.pgids.add(self.pgid)
        self.incarnations += 1
        self.client = wait_until(lambda: connect(self.port), 30, "a client connection", ignore=(NodeDown,))
        return self

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text()[-chars:]
        except FileNotFoundError:
            return ""

    def snapshot(self) -> Snapshot:
        return snapshot(self.client, self.admin_pid, self.pgid)

    def strays(self) -> set[int]:
        return strays(self.client, self.admin_pid, self.pgid)

    def kill(self) -> None:
        """SIGKILL the CLI process and the whole actor group at once."""
        for pgid in (self.proc.pid if self.proc else None, self.info.get("pgid")):
            if pgid:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.wait_down(expect_status=-signal.SIGKILL)

    def wait_down(self, expect_status: int | None = None, timeout: float = 30.0) -> int:
        """Wait until the CLI process exited and its group is empty; its exit status."""
        assert self.proc is not None
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"node CLI {self.proc.pid} still runs {timeout}s later: {self.log_tail()}") from None
        if expect_status is not None:
            assert status == expect_status, f"node exited {status}, not {expect_status}: {self.log_tail()}"
        pgid = self.info.get("pgid")
        if pgid:
            wait_until(lambda: not group_pids(pgid), timeout, f"every process of node group {pgid} to be gone")
        return status

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as a user stops a node: exit status 0 and nothing left."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.wait_down(expect_status=0, timeout=timeout)

    def cleanup(self) -> None:
        """Kill whatever is left of every incarnation (for ``finally``)."""
        groups = set(self.pgids) | ({self.proc.pid} if self.proc else set())
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        while any(group_pids(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.05)
