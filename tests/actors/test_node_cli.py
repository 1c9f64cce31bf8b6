"""The console command: a real node started, inspected and stopped in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import free_port, group_pids, listening_addresses, wait_until

ROOT = Path(__file__).resolve().parents[2]
#: The ``otpjobs`` command the install made, beside this interpreter.
CONSOLE_SCRIPT = Path(sys.executable).parent / "otpjobs"


class NodeProcess:
    """``python -m actors node start`` in the foreground, as a user runs it."""

    def __init__(self, tmp_path: Path, port: int) -> None:
        self.port = port
        self.command = [sys.executable, "-m", "actors"]  # the installed script: [str(CONSOLE_SCRIPT)]
        self.cwd = ROOT
        self.extra: list[str] = []
        self.log = tmp_path / f"node-{port}.log"
        self.env = dict(
            os.environ, OTPJOBS_RUNTIME_DIR=str(tmp_path / "run"), THESPLOG_FILE=str(tmp_path / "thespian.log")
        )
        self.store = f"sqlite:///{tmp_path / 'store.db'}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "NodeProcess":
        self.log.unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *self.command,
                    "node",
                    "start",
                    "--port",
                    str(self.port),
                    "--store",
                    self.store,
                    "--http-port",
                    "0",
                    *self.extra,
                ],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        wait_until(lambda: "node_up" in self.log.read_text() or self.proc.poll() is not None, what="node_up")
        assert self.proc.poll() is None, self.log.read_text()
        return self

    def runtime(self) -> dict:
        return json.loads((Path(self.env["OTPJOBS_RUNTIME_DIR"]) / f"node-{self.port}.json").read_text())

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "actors", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60
        )


@pytest.fixture
def node(tmp_path):
    proc = NodeProcess(tmp_path, free_port())
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.proc.send_signal(signal.SIGTERM)
        proc.proc.wait(30)
    if (Path(proc.env["OTPJOBS_RUNTIME_DIR"]) / f"node-{proc.port}.json").exists():
        subprocess.run(
            [sys.executable, "-m", "actors", "node", "stop", "--port", str(proc.port)],
            cwd=ROOT,
            env=proc.env,
            capture_output=True,
            timeout=60,
        )  # kills only what is provably the node's


def test_node_starts_logs_up_and_stops_cleanly_on_sigterm(node):
    node.start()
    pgid = node.runtime()["pgid"]
    assert group_pids(pgid), "the node's actor processes run"
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 0
    text = node.log.read_text()
    assert "node_stopping reason=SIGTERM" in text and "node_stopped" in text
    wait_until(lambda: not group_pids(pgid), what="every node process gone")
    assert not (Path(node.env["OTPJOBS_RUNTIME_DIR"]) / f"node-{node.port}.json").exists()


@pytest.mark.slow
def test_every_socket_of_the_node_listens_on_loopback_only(node):
    node.start()
    pids = group_pids(node.runtime()["pgid"]) | {node.proc.pid}
    addresses = listening_addresses(pids)
    assert f"127.0.0.1:{node.port}" in addresses
    assert addresses and all(a.startswith("127.0.0.1:") for a in addresses), addresses


@pytest.mark.slow
def test_status_and_stop_commands(node):
    node.start()
    status = node.cli("node", "status", "--port", str(node.port))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["running"] is True
    stop = node.cli("node", "stop", "--port", str(node.port))
    assert stop.returncode == 0, stop.stderr
    assert node.proc.wait(30) == 0
    down = node.cli("node", "status", "--port", str(node.port))
    assert down.returncode == 1 and json.loads(down.stdout)["running"] is False


@pytest.mark.slow
def test_a_sigkilled_node_command_takes_its_node_down_and_a_new_one_starts(node):
    node.start()
    old_pgid = node.runtime()["pgid"]
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait(10)
    wait_until(lambda: not group_pids(old_pgid), 3, "the node to die with its command")
    assert "node_owner_down" in node.log.read_text(), "its processes stopped at once, its last report still logged"
    t0 = time.monotonic()
    node.start()
    assert time.monotonic() - t0 < 15
    assert node.runtime()["pgid"] != old_pgid


def test_status_of_a_port_with_no_node_starts_nothing(node):
    result = node.cli("node", "status", "--port", str(node.port))
    assert result.returncode == 1
    assert json.loads(result.stdout)["running"] is False
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", node.port)) != 0, "no actor system was started by the client"


@pytest.mark.slow
def test_jobs_and_types_commands_round_trip(node):
    assert node.cli("jobs", "add", "t", "j0", "{}", "--store", node.store).returncode == 0, (
        "adding to a type with no timeout declares it (issue 27, item 8)"
    )
    assert node.cli("jobs", "remove", "t", "j0", "--store", node.store).returncode == 0
    assert node.cli("types", "set-timeout", "t", "30", "--store", node.store).returncode == 0
    assert node.cli("jobs", "add", "t", "j1", '{"x": 1}', "--store", node.store).returncode == 0
    bad = node.cli("jobs", "add", "t", "j2", "{not json", "--store", node.store)
    assert bad.returncode == 2 and "not JSON" in bad.stderr
    listed = [json.loads(line) for line in node.cli("jobs", "list", "t", "--store", node.store).stdout.splitlines()]
    assert [(j["id"], j["state"], j["data"]) for j in listed] == [("j1", "pending", {"x": 1})]
    types = [json.loads(line) for line in node.cli("types", "list", "--store", node.store).stdout.splitlines()]
    assert types == [{"type": "t", "timeout": 30.0}]
    assert node.cli("jobs", "remove", "t", "j1", "--store", node.store).returncode == 0
    assert node.cli("jobs", "list", "t", "--store", node.store).stdout == ""


@pytest.mark.slow
def test_http_port_zero_serves_on_a_port_the_system_picked(node):
    import urllib.request

    from actors.http.server import HTTP_SERVER_NAME, GetHttpInfo
    from supervision import connect

    node.start()
    info = connect(node.port).call(HTTP_SERVER_NAME, GetHttpInfo(), 10)
    assert info["port"] > 0 and info["bind_address"] == "127.0.0.1"
    with urllib.request.urlopen(f"http://127.0.0.1:{info['port']}/_up", timeout=10) as resp:
        assert resp.status == 200
    assert f"127.0.0.1:{info['port']}" in listening_addresses(group_pids(node.runtime()["pgid"]))


def test_a_busy_http_port_fails_the_start_naming_it_before_the_store_is_created(node, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        http_port = taken.getsockname()[1]
        store = tmp_path / "never.db"
        result = node.cli(
            "node", "start", "--port", str(node.port), "--store", f"sqlite:///{store}", "--http-port", str(http_port)
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"otpjobs: error: HTTP port 127.0.0.1:{http_port} is not available (Address already in use); another "
        "node may be using it: choose another with --http-port or [node] http_port"
    ]
    assert not any(p.name.startswith("never.db") for p in tmp_path.iterdir()), "no store created"
    assert not (Path(node.env["OTPJOBS_RUNTIME_DIR"]) / f"node-{node.port}.json").exists(), "no node started"


def test_the_installed_command_imports_scheduler_handlers_from_its_working_directory(node, tmp_path):
    """Found by a review: ``otpjobs node start`` (the installed script, whose
    ``sys.path`` starts with the script's directory, not the working
    directory as ``python -m`` does) refused a handler module beside it:
    400 ``no module named 'mymod' on the node's path``, 3 of 3 runs."""
    import urllib.request

    from actors.http.server import HTTP_SERVER_NAME, GetHttpInfo
    from supervision import connect

    assert CONSOLE_SCRIPT.exists(), "the package is installed (pip install -e .) in this interpreter's venv"
    app = tmp_path / "app"
    app.mkdir()
    (app / "cwd_handler_mod.py").write_text("def spin(ctx):\n    ctx.wait(30)\n")
    (app / "node.ini").write_text("[replicator]\nhandlers = cwd_handler_mod\n")
    node.command, node.cwd, node.extra = [str(CONSOLE_SCRIPT)], app, ["--config", "node.ini"]
    node.start()
    info = connect(node.port).call(HTTP_SERVER_NAME, GetHttpInfo(), 10)
    request = urllib.request.Request(
        f"http://127.0.0.1:{info['port']}/_replicate",
        data=json.dumps({"handler": "cwd_handler_mod:spin"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status in (200, 201, 202), resp.read()
