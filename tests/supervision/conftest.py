"""Fixtures for the supervision tests: a real multiprocTCPBase node on 127.0.0.1.

Thespian keeps one actor system per process (``ActorSystem.systemBase`` is
a class-level singleton), so a test process talks to one node at a time: the
node is shared per module, and each test isolates itself under its own
temporary supervisor (:class:`Tree`). After every test the node's process
group must be back to what it was (no stray actor processes, no orphans);
after the module the node's processes are all gone and its runtime file
removed.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable

_TMP = Path(tempfile.mkdtemp(prefix="supervision-tests-"))
os.environ["THESPLOG_FILE"] = str(_TMP / "thespian.log")
os.environ["OTPJOBS_RUNTIME_DIR"] = str(_TMP / "runtime")

import pytest  # noqa: E402

from supervision import ChildSpec, NoProc, start_node  # noqa: E402
from supervision.runtime import runtime_file  # noqa: E402
from tests import procs  # noqa: E402
from tests.procs import free_port, group_pids, pid_alive, proc_stat  # noqa: E402,F401 - used by the test modules
from tests.supervision.fixtures import Probe, Sup, Worker  # noqa: E402

ROOT_FLAGS = {"strategy": "one_for_one", "intensity": 1000, "period": 1}


# ------------------------------------------------------------------ helpers
def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until truthy; NoProc counts as "not yet" (an actor between two lives)."""
    return procs.wait_until(predicate, timeout, what, step=0.005, ignore=(NoProc,))


def alive(pid: int | None) -> bool:
    """True if ``pid`` is a live process (zombies count as dead)."""
    return bool(pid) and pid_alive(pid)


def orphans(node: Any) -> set[int]:
    """Processes of the node's group that lost their parent (reparented)."""
    out = set()
    for pid in group_pids(node.pgid):
        st = proc_stat(pid)
        if st and pid != node.admin_pid and (st[1] == 1 or not alive(st[1])):
            out.add(pid)
    return out


def read_log(path: Path) -> list[str]:
    """Lines of a Worker event log."""
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def assert_node_gone(node: Any, pids: set[int]) -> None:
    """After stop: no process of the node survives and no runtime file is left."""
    wait_until(
        lambda: not any(alive(p) for p in pids) and not group_pids(node.pgid), 10, "the node's processes to exit"
    )
    assert not runtime_file(node.port).exists()


def start_test_node(specs: list | None = None, flags: Any = None) -> Any:
    return start_node(free_port(), flags or ROOT_FLAGS, specs or [], level=logging.CRITICAL)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def node():
    """A node shared by a module's tests (they isolate under their own supervisor)."""
    n = start_test_node()
    yield n
    pids = group_pids(n.pgid) | {n.admin_pid, n.pid}
    assert not orphans(n), "orphan processes in the node's group"
    n.stop()
    assert_node_gone(n, pids)


class Tree:
    """One test's corner of the shared node: temporary supervisors under the root."""

    def __init__(self, node: Any, log: Path) -> None:
        self.node = node
        self.c = node.client()
        self.root = self.c.node
        self.log = log
        self._ids: list[str] = []

    def w(
        self,
        ident: str,
        cls: type = Worker,
        restart: str = "permanent",
        shutdown: Any = None,
        name: str | None = None,
        **args: Any,
    ) -> ChildSpec:
        """A Worker (or Probe) spec that logs to this test's event log."""
        return ChildSpec(
            ident, cls, {"id": ident, "log": str(self.log), **args}, restart=restart, shutdown=shutdown, name=name
        )

    def sup_spec(self, ident: str, flags: Any, specs: list, restart: str = "permanent") -> ChildSpec:
        """A nested Sup spec."""
        return ChildSpec(
            ident,
            Sup,
            {"id": ident, "log": str(self.log), "flags": flags, "specs": specs},
            restart=restart,
            type="supervisor",
        )

    def sup(self, flags: Any, specs: list, ident: str = "top") -> Any:
        """Start a temporary supervisor under the root; its address."""
        unique = f"{ident}-{uuid.uuid4().hex[:8]}"
        spec = ChildSpec(
            unique,
            Sup,
            {"id": ident, "log": str(self.log), "flags": flags, "specs": specs},
            restart="temporary",
            type="supervisor",
        )
        addr = self.c.start_child(self.root, spec)
        self._ids.append(unique)
        return addr

    def kids(self, sup: Any) -> dict:
        """which_children as {id: ChildInfo} (sofo rows keyed by position)."""
        rows = self.c.which_children(sup)
        return {(r.id if r.id is not None else i): r for i, r in enumerate(rows)}

    def lines(self) -> list[str]:
        return read_log(self.log)

    def cleanup(self) -> None:
        for unique in self._ids:
            try:
                self.c.terminate_child(self.root, unique)
            except NoProc:
                pass  # it gave up by itself during the test


@pytest.fixture
def tree(node, tmp_path):
    """A Tree for one test; afterwards the node's processes are back to before."""
    baseline = group_pids(node.pgid)
    t = Tree(node, tmp_path / "events.log")
    yield t
    t.cleanup()
    wait_until(lambda: group_pids(node.pgid) <= baseline, 10, "the test's actor processes to exit")
    assert not orphans(node), "orphan processes in the node's group"
