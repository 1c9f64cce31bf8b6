"""Issue 31: a node start never kills what is not its own; runtime files only
where no one else can write.

Real nodes, real processes: an unrelated process (a ``sleep`` in a session
of its own, as the user's editor or database would be) is named by a
runtime file and must survive every start and stop; a really dead node's
file is cleared; an unsafe runtime directory stops the command before it
creates or kills anything; a symlink is never followed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from supervision import NodeAlreadyRunning, RuntimeDirError, start_node, stop_node
from supervision import runtime
from supervision.procs import holds_file, pid_alive, proc_stat, signal_process, start_time
from supervision.system import port_open
from tests.procs import free_port, group_pids, wait_until

ROOT = Path(__file__).resolve().parents[2]
FLAGS = {"strategy": "one_for_one", "intensity": 10, "period": 10}
WORKER = "tests.supervision.fixtures:Worker"


@pytest.fixture
def rundir(tmp_path, monkeypatch):
    """A private runtime directory of the test's own (for this process and the nodes it starts)."""
    path = tmp_path / "run"
    monkeypatch.setenv("OTPJOBS_RUNTIME_DIR", str(path))
    return path


@pytest.fixture
def bystander():
    """An unrelated process, leader of a process group of its own."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def plant(rundir: Path, port: int, record: dict) -> Path:
    rundir.mkdir(mode=0o700, exist_ok=True)
    path = rundir / f"node-{port}.json"
    path.write_text(json.dumps(record))
    return path


def cleanup_lines(caplog, port: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"node_cleanup port={port} ")]


def start(port: int):
    from supervision import ChildSpec

    return start_node(port, FLAGS, [ChildSpec("w", WORKER, {"id": "w"}, name="w")], level=logging.CRITICAL)


_LEAVE = """
import json, logging, sys
from supervision import ChildSpec, start_node
node = start_node(int(sys.argv[1]), {"strategy": "one_for_one", "intensity": 10, "period": 10},
                  [ChildSpec("w", "tests.supervision.fixtures:Worker", {"id": "w"})], level=logging.CRITICAL,
                  die_with_owner=False)
print(json.dumps({"pgid": node.pgid, "admin": node.admin_pid, "pid": node.pid}), flush=True)
"""


def leave_node(port: int, tmp_path: Path) -> dict:
    """A node left running, on purpose, by a process that exited."""
    out, err = tmp_path / "leave.out", tmp_path / "leave.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        rc = subprocess.run(
            [sys.executable, "-c", _LEAVE, str(port)],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=fo,
            stderr=fe,
            stdin=subprocess.DEVNULL,
            timeout=60,
        ).returncode
    assert rc == 0, err.read_text()[-2000:]
    return json.loads(out.read_text().splitlines()[-1])


# ------------------------------------------------------------ identity
@pytest.mark.parametrize("shape", ["version_1", "forged_start_times", "exact_start_times"])
def test_a_runtime_file_naming_an_unrelated_process_group_kills_nothing(rundir, bystander, caplog, shape):
    port = free_port()
    victim = bystander.pid
    record = {"pid": victim, "admin_pid": victim, "pgid": victim, "owner": victim}
    if shape != "version_1":
        real = start_time(victim)
        starts = real if shape == "exact_start_times" else real + 1
        record.update(
            version=runtime.VERSION,
            boot_id=runtime.boot_id(),
            pid_start=starts,
            admin_start=starts,
            owner_start=starts,
            die_with_owner=True,
            port=port,
        )
    plant(rundir, port, record)
    caplog.set_level(logging.INFO, logger="supervision.system")
    node = start(port)
    try:
        assert node.client().call("w", "ping") == "pong"
    finally:
        assert stop_node(port)
    assert bystander.poll() is None and group_pids(victim) == {victim}, "the unrelated process lives"
    assert any("case=not_ours killed=0" in line for line in cleanup_lines(caplog, port)), caplog.text


def test_stop_of_a_port_whose_file_names_an_unrelated_group_kills_nothing(rundir, bystander, caplog):
    port = free_port()
    plant(
        rundir, port, {"pid": bystander.pid, "admin_pid": bystander.pid, "pgid": bystander.pid, "owner": bystander.pid}
    )
    caplog.set_level(logging.INFO, logger="supervision.system")
    assert stop_node(port) is False
    assert bystander.poll() is None
    assert not (rundir / f"node-{port}.json").exists()
    assert any("case=not_ours" in line for line in cleanup_lines(caplog, port))


def test_a_stale_file_of_a_really_dead_node_is_cleaned_up(rundir, bystander, caplog, tmp_path):
    port = free_port()
    first = leave_node(port, tmp_path)
    entry = runtime.examine(port)
    members = group_pids(first["pgid"])
    assert entry.held and first["pid"] in members and first["admin"] in members
    assert members <= runtime.node_processes(entry), "every process of its group holds the file"
    os.killpg(first["pgid"], signal.SIGKILL)  # proven just above: the node's whole group
    wait_until(lambda: not group_pids(first["pgid"]), 10, "the node's processes to die")
    wait_until(lambda: not port_open(port), 10, "its admin port to close")
    assert runtime.examine(port).held is False, "the lock went with the last process"
    caplog.set_level(logging.INFO, logger="supervision.system")
    node = start(port)
    try:
        assert node.client().call("w", "ping") == "pong"
        assert runtime.read_runtime(port)["pid"] == node.pid
    finally:
        assert stop_node(port)
    lines = cleanup_lines(caplog, port)
    assert any("case=stale_dead killed=0" in line for line in lines), caplog.text
    assert bystander.poll() is None


@pytest.mark.slow
def test_what_a_killed_node_left_running_is_killed_and_nothing_else(rundir, bystander, caplog, tmp_path):
    port = free_port()
    first = leave_node(port, tmp_path)
    left = {pid: start_time(pid) for pid in group_pids(first["pgid"])}
    try:
        os.kill(first["admin"], signal.SIGKILL)  # its logger keeps the admin port: the next start must clear it
        wait_until(lambda: not pid_alive(first["admin"]), 10, "the admin to die")
        assert port_open(port)
        caplog.set_level(logging.INFO, logger="supervision.system")
        node = start(port)
        try:
            assert node.client().call("w", "ping") == "pong"
        finally:
            assert stop_node(port)
        wait_until(lambda: not group_pids(first["pgid"]), 10, "the old node's processes to be gone")
        assert any("case=stale_killed" in line for line in cleanup_lines(caplog, port)), caplog.text
        assert bystander.poll() is None
    finally:
        for pid, started in left.items():
            signal_process(pid, started, signal.SIGKILL)


def test_only_holders_of_the_file_and_their_group_are_killed(rundir, bystander):
    port = free_port()
    fd = runtime.claim(port, runtime.owner_record(False))
    os.close(fd)
    path = runtime.runtime_file(port)
    # a process holding the file (as every process of a node does), with a child in its group that does not
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, time; f = open({str(path)!r}); subprocess.Popen(['sleep', '60']); time.sleep(60)",
        ],
        start_new_session=True,
    )
    try:
        entry = wait_until(
            lambda: (e := runtime.examine(port)) and runtime.node_processes(e) and e, 10, "the holder to open the file"
        )
        wait_until(lambda: len(group_pids(holder.pid)) == 2, 10, "the holder's child")
        mates = group_pids(holder.pid) - {holder.pid}
        killed = runtime.kill_node_processes(entry)
        assert killed == {holder.pid} | mates
        holder.wait(10)
        wait_until(lambda: not group_pids(holder.pid), 10, "the holder's group to be gone")
        assert bystander.poll() is None, "not a holder, not in a holder's group: left alone"
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_of_another_nodes_record_under_the_same_inode_is_not_killed(rundir):
    """An inode number is reused once its file is gone: a holder counts only
    with the very record (its nonce) the entry was read from."""
    port = free_port()
    os.close(runtime.claim(port, runtime.owner_record(False)))
    entry = runtime.examine(port)
    path = runtime.runtime_file(port)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import time; f = open({str(path)!r}); time.sleep(60)"], start_new_session=True
    )
    try:
        wait_until(lambda: runtime.node_processes(entry), 10, "the holder to open the file")
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        runtime.write(fd, dict(entry.record, nonce="another node"))  # the same inode, another node's record
        os.close(fd)
        assert runtime.node_processes(entry) == set()
        assert runtime.kill_node_processes(entry) == set()
        assert holder.poll() is None
        assert runtime.remove(entry) is False, "not that node's file any more"
    finally:
        holder.kill()
        holder.wait()


def test_a_node_starting_on_the_port_is_left_alone_and_the_port_refused(rundir):
    port = free_port()
    fd = runtime.claim(port, runtime.owner_record(True))  # a start under way (this process is its starter)
    try:
        record = runtime.read_runtime(port)
        assert record["starter"] == os.getpid() and "owner" not in record, "no owner until it is up"
        with pytest.raises(NodeAlreadyRunning, match="starting"):
            start(port)
        assert runtime.read_runtime(port) == record
    finally:
        os.close(fd)
    assert runtime.examine(port).held is False
    node = start(port)  # that start died: its file is cleared
    assert stop_node(port)
    assert node.pid


def test_a_process_is_signalled_only_with_its_own_start_time(bystander):
    started = start_time(bystander.pid)
    assert signal_process(bystander.pid, started + 1, signal.SIGKILL) is False
    assert signal_process(bystander.pid, None, signal.SIGKILL) is False
    assert bystander.poll() is None
    assert signal_process(bystander.pid, started, signal.SIGKILL) is True
    assert bystander.wait(10) == -signal.SIGKILL


# ------------------------------------------------------------ the directory
@pytest.mark.slow
@pytest.mark.parametrize("problem", ["world_writable", "group_writable", "foreign_owner"])
def test_an_unsafe_runtime_dir_stops_every_command_before_it_creates_or_kills_anything(tmp_path, bystander, problem):
    shared = tmp_path / "shared"
    shared.mkdir()
    if problem == "world_writable":
        os.chmod(shared, 0o777)
        says = "is writable by group or others (mode 0777)"
    elif problem == "group_writable":
        os.chmod(shared, 0o770)
        says = "is writable by group or others (mode 0770)"
    else:
        os.chmod(shared, 0o700)
        try:
            os.chown(shared, 65534, 65534)
        except PermissionError:
            pytest.skip("needs root to give the directory to another user")
        says = "is owned by uid 65534"
    port = free_port()
    planted = shared / f"node-{port}.json"
    planted.write_bytes(
        json.dumps(
            {"pid": bystander.pid, "admin_pid": bystander.pid, "pgid": bystander.pid, "owner": bystander.pid}
        ).encode()
    )
    before = sorted(os.listdir(shared))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "tasks.py").write_text("def run(ctx):\n    return 1\n")
    env = dict(os.environ, OTPJOBS_RUNTIME_DIR=str(shared), PYTHONPATH=str(ROOT))
    store = f"sqlite:///{tmp_path / 'store.db'}"
    commands = [
        ["node", "start", "--port", str(port), "--store", store, "--http-port", "0"],
        ["worker", "t=tasks:run", "--port", str(port), "--store", store],
        ["node", "stop", "--port", str(port)],
    ]
    for args in commands:
        result = subprocess.run(
            [sys.executable, "-m", "actors", *args],
            cwd=tmp_path / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(shared) in lines[0] and says in lines[0], (args, result.stderr)
        assert sorted(os.listdir(shared)) == before, "nothing created there"
        assert not (tmp_path / "store.db").exists(), "no store file"
        assert not port_open(port), "no actor system"
        assert bystander.poll() is None, "nothing killed"


def test_the_default_runtime_dir_is_created_private(tmp_path, monkeypatch):
    monkeypatch.delenv("OTPJOBS_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.umask(0)  # the most permissive umask: the mode must not come from it
    try:
        path = runtime.runtime_dir()
    finally:
        os.umask(old)
    assert path == tmp_path / f"otpjobs-{os.getuid()}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert runtime.runtime_dir() == xdg / "otpjobs"
    assert stat.S_IMODE((xdg / "otpjobs").stat().st_mode) == 0o700


def test_a_symlink_in_place_of_the_default_runtime_dir_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("OTPJOBS_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"otpjobs-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(RuntimeDirError) as caught:
        start_node(free_port(), FLAGS, [])
    assert "is a symbolic link" in str(caught.value) and str(tmp_path / f"otpjobs-{os.getuid()}") in str(caught.value)
    assert os.listdir(elsewhere) == []


# ------------------------------------------------------------ symlinks
@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlink_planted_as_the_runtime_file_is_not_followed(rundir, bystander, caplog, tmp_path, target_exists):
    port = free_port()
    target = tmp_path / "precious.json"
    content = json.dumps(
        {"pid": bystander.pid, "admin_pid": bystander.pid, "pgid": bystander.pid, "owner": bystander.pid}
    ).encode()
    if target_exists:
        target.write_bytes(content)
    rundir.mkdir(mode=0o700)
    (rundir / f"node-{port}.json").symlink_to(target)
    caplog.set_level(logging.INFO, logger="supervision.system")
    assert runtime.read_runtime(port) is None, "a symlink is not read"
    node = start(port)
    try:
        path = rundir / f"node-{port}.json"
        assert not path.is_symlink() and path.is_file()
        assert runtime.read_runtime(port)["pid"] == node.pid
    finally:
        assert stop_node(port)
    assert (target.read_bytes() == content) if target_exists else not target.exists(), "the target is untouched"
    assert bystander.poll() is None
    assert any("case=not_a_file" in line for line in cleanup_lines(caplog, port)), caplog.text


def test_a_runtime_file_is_published_only_if_its_name_is_free(rundir, tmp_path):
    port = free_port()
    rundir.mkdir(mode=0o700)
    target = tmp_path / "target"
    (rundir / f"node-{port}.json").symlink_to(target)  # dangling
    with pytest.raises(FileExistsError):
        runtime.claim(port, runtime.owner_record(True))
    assert not target.exists()
    assert [p.name for p in rundir.iterdir()] == [f"node-{port}.json"], "no temporary file left"


def test_the_runtime_file_records_pids_with_start_times_and_every_node_process_holds_it(rundir):
    port = free_port()
    node = start(port)
    try:
        record = runtime.read_runtime(port)
        assert record["pid_start"] == start_time(node.pid) and record["admin_start"] == start_time(node.admin_pid)
        assert record["owner"] == os.getpid() and record["owner_start"] == start_time(os.getpid())
        assert record["boot_id"] == runtime.boot_id() and record["pgid"] == node.pgid
        worker = node.client().call("w", "pid")
        assert {node.pid, node.admin_pid, worker} <= node.processes()
        assert all(proc_stat(pid).pgid == node.pgid for pid in node.processes())
        assert stat.S_IMODE(os.stat(runtime.runtime_file(port)).st_mode) == 0o600
        assert not holds_file(os.getpid(), node.entry.dev, node.entry.ino), "the starter let go of it"
    finally:
        assert stop_node(port)
    assert not runtime.runtime_file(port).exists()
