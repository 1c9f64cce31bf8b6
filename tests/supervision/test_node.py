"""The node owns its processes: loopback only, no accidental systems, restart after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from supervision import NodeDown, connect
from supervision.procs import signal_process, start_time
from supervision.runtime import runtime_file
from supervision.system import port_open
from tests.supervision.conftest import alive, free_port, group_pids, wait_until

ONE = {"strategy": "one_for_one", "intensity": 10, "period": 10}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def listening_sockets(pids: set[int]) -> list[tuple[str, str]]:
    """(table, local address) of every listening TCP socket held by ``pids``."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (FileNotFoundError, PermissionError):
            continue
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/net/{table}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                    found.append((table, cols[1]))
    return found


def test_node_binds_only_loopback(tree):
    sup = tree.sup(ONE, [tree.w("a"), tree.sup_spec("n", ONE, [tree.w("n1")])])
    assert tree.kids(sup)
    pids = group_pids(tree.node.pgid) | {os.getpid()}
    sockets = listening_sockets(pids)
    assert len(sockets) >= 5, sockets  # admin, logger?, node supervisor, sup, a, n, n1
    assert all(table == "tcp" and addr.startswith("0100007F:") for table, addr in sockets), sockets


def test_connect_to_a_port_without_node_raises_node_down_quickly():
    port = free_port()
    kids_before = set(os.listdir("/proc"))
    t = time.monotonic()
    with pytest.raises(NodeDown):
        connect(port)
    assert time.monotonic() - t < 1
    assert not port_open(port), "connect must not start an actor system"
    new = {p for p in set(os.listdir("/proc")) - kids_before if p.isdigit()}
    assert not [p for p in new if alive(int(p)) and _ppid(int(p)) == os.getpid()]


def test_connect_never_starts_an_actor_system_when_the_node_dies_just_after_its_checks(monkeypatch):
    """The node answered connect's checks, then died (killed, as a test's
    cleanup or an operator does) before the client's ActorSystem reached its
    admin: Thespian would start a new admin and logger on the port, left
    running for ever (seen after CI: a worker host's stop_node, called as its
    node was being killed)."""
    import supervision.system as system

    port = free_port()
    monkeypatch.setattr(system, "port_open", lambda *a, **k: True)  # the checks passed; the admin is gone now
    try:
        with pytest.raises(NodeDown):
            connect(port)
    finally:
        monkeypatch.undo()
        started = port_open(port)
        if started:  # clean up what the old code started
            from thespian.actors import ActorSystem

            ActorSystem(system.BASE, {"Admin Port": port}, transientUnique=True).shutdown()
    assert not started, "connect started an actor system"


def test_a_dead_nodes_leftover_file_in_the_clients_directory_does_not_hide_a_live_node(tree, tmp_path, monkeypatch):
    """A client whose runtime directory still holds the file of a node that
    died on this port long ago (SIGKILLed: nothing removed it; its lock is
    free) connects to the node that listens there now, started under
    another directory: the dead node's file says nothing of who listens."""
    port = tree.node.port
    record = json.loads(runtime_file(port).read_text())
    record["admin_start"] = record["admin_start"] + 1  # that admin is gone
    client_dir = tmp_path / "client-runtime"
    client_dir.mkdir(mode=0o700)
    (client_dir / runtime_file(port).name).write_text(json.dumps(record))
    monkeypatch.setenv("OTPJOBS_RUNTIME_DIR", str(client_dir))
    client = connect(port)
    assert {child.id for child in client.which_children(client.node)} >= {
        child.id for child in tree.c.which_children(tree.c.node)
    }


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError):
        return -1


_START = """
import json, logging, sys
from supervision import ChildSpec, start_node
from tests.supervision.fixtures import Worker
port, mode = int(sys.argv[1]), sys.argv[2]
node = start_node(port, {"strategy": "one_for_one", "intensity": 10, "period": 10},
                  [ChildSpec("w", Worker, {"id": "w"})], level=logging.CRITICAL, timeout=20,
                  die_with_owner=mode != "leave")
c = node.client()
rows = c.which_children(c.node)
print(json.dumps({"pgid": node.pgid, "admin": node.admin_pid, "pid": node.pid, "w": rows[0].pid}), flush=True)
if mode == "stop":
    node.stop()
"""


def _run_node(port: int, mode: str, tmp_path) -> dict:
    """Start a node from a fresh process (files, not pipes: the node's daemons inherit them)."""
    out, err = tmp_path / f"{mode}.out", tmp_path / f"{mode}.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        rc = subprocess.run(
            [sys.executable, "-c", _START, str(port), mode],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=fo,
            stderr=fe,
            timeout=60,
            stdin=subprocess.DEVNULL,
        ).returncode
    assert rc == 0, err.read_text()[-2000:]
    return json.loads(out.read_text().strip().splitlines()[-1])


@pytest.mark.slow
def test_node_starts_on_the_port_of_a_sigkilled_predecessor(tmp_path):
    port = free_port()
    first = _run_node(port, "leave", tmp_path)  # a node left running (on purpose) by a process that exited
    old = {pid: start_time(pid) for pid in group_pids(first["pgid"])}  # while it runs: all the node's
    try:
        assert first["pid"] in old and first["w"] in old
        os.kill(first["admin"], signal.SIGKILL)
        t = time.monotonic()
        second = _run_node(port, "stop", tmp_path)
        assert time.monotonic() - t < 30
        assert second["pgid"] != first["pgid"]
        wait_until(lambda: not any(alive(p) for p in old), 10, "the predecessor's orphans to be killed")
        wait_until(lambda: not group_pids(second["pgid"]), 10, "the second node's processes to exit")
        assert not runtime_file(port).exists()
        assert not port_open(port)
    finally:
        for pid, start in old.items():
            signal_process(pid, start, signal.SIGKILL)
        runtime_file(port).unlink(missing_ok=True)


_STARTER_KILLED = """
import os, signal, sys
from thespian.actors import ActorSystem
from supervision.owner import forking_node
from supervision.procs import start_time
from supervision.system import BASE
port = int(sys.argv[1])
owner = (os.getpid(), start_time(os.getpid())) if sys.argv[2] == "owned" else None
with forking_node(owner):
    ActorSystem(BASE, {"Admin Port": port}, transientUnique=True)
os.kill(os.getpid(), signal.SIGKILL)  # after the admin's fork, before any node supervisor watches this process
"""


def _admin_group(port: int) -> int:
    """The process group of the actor system listening on ``port`` (its admin's session)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    inodes.add(fields[9])
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            links = {os.readlink(f"/proc/{name}/fd/{fd}") for fd in os.listdir(f"/proc/{name}/fd")}
        except OSError:
            continue
        if any(f"socket:[{inode}]" in links for inode in inodes):
            return os.getpgid(int(name))
    return 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["owned", "left"])
def test_a_starter_killed_before_its_node_supervisor_watches_it_takes_the_admin_down(tmp_path, mode):
    """The admin and the logger exist from the fork on; the node supervisor
    watches the owner only once it runs. A starter SIGKILLed in between left
    them running, holding the port; the admin now watches its owner from its
    fork (a node that does not die with its owner is left, as asked)."""
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-c", _STARTER_KILLED, str(port), mode],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == -signal.SIGKILL
    pgid = _admin_group(port)
    assert pgid > 1, "the admin was up and listening when its starter died"
    try:
        if mode == "owned":
            wait_until(lambda: not group_pids(pgid), 5, "the admin and the logger to die with their starter")
            wait_until(lambda: not port_open(port), 5, "the admin port to close")  # as the kernel closes their sockets
        else:
            time.sleep(1.5)  # past the watch's grace: still up
            assert group_pids(pgid) and port_open(port)
    finally:
        for pid in group_pids(pgid):
            signal_process(pid, start_time(pid), signal.SIGKILL)


_FREEZE = """
import json, os, subprocess, sys, time
from supervision.owner import freeze_node_group
kids = {
    title: subprocess.Popen(["bash", "-c", f"exec -a '{title} ActorAddr-(T|:1)' sleep 60"])
    for title in ("MultiProcAdmin", "logger", "Worker", "Dispatcher")
}
time.sleep(0.3)  # each exec'd under its title
stopped = freeze_node_group()
time.sleep(0.1)
states = {}
for title, kid in kids.items():
    with open(f"/proc/{kid.pid}/stat") as f:
        states[title] = f.read().rsplit(")", 1)[1].split()[0]
print(json.dumps({"stopped": stopped, "states": states}), flush=True)
for kid in kids.values():
    kid.kill()
    kid.wait()
"""


def test_a_node_whose_owner_died_stops_its_work_at_once_but_its_log(tmp_path):
    """Found by a review: the node went on for the 0.2 s it gives its last
    report to reach the log (a worker host started 3 jobs after its command
    was SIGKILLed, one of them then run again as lost). The node's processes
    are now stopped at once, but the admin and the logger."""
    out = subprocess.run(
        [sys.executable, "-c", _FREEZE],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,  # its own session: the group is a node's, as the admin makes it
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["states"] == {"MultiProcAdmin": "S", "logger": "S", "Worker": "T", "Dispatcher": "T"}, found
    assert found["stopped"] == 2
