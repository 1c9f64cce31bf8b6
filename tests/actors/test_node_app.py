"""A user's own tree on a node: ``otpjobs node start --app module:callable``.

The app lives in a directory of its own (the node's working directory, as a
user's project would be), with only the package installed: its actor
answers a call through the node, is restarted after a SIGKILL, shows in
``node status``, and stops with the node. A bad app is one line on stderr
and exit status 2, with nothing started (no actor process, no store file).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from supervision import connect
from tests.procs import free_port, group_pids, wait_until

APP = textwrap.dedent('''
    from supervision import ChildSpec, GenServer


    class Greeter(GenServer):
        """Answers ("hello", who) and ("pid",)."""

        def init(self, args):
            self.greeting = args["greeting"]

        def handle_call(self, msg, from_):
            if msg[0] == "hello":
                return f"{self.greeting}, {msg[1]}"
            return __import__("os").getpid()


    def children():
        return [ChildSpec("greeter", "myapp:Greeter", {"greeting": "hi"}, name="greeter")]


    def not_a_list():
        return ChildSpec("greeter", "myapp:Greeter", {"greeting": "hi"})


    def raises():
        raise RuntimeError("no database configured")


    def typo():
        return [ChildSpec("greeter", "myapp:Greter", {"greeting": "hi"})]


    def takes_a_name():
        return [ChildSpec("greeter", "myapp:Greeter", {"greeting": "hi"}, name="scheduler")]


    def takes_an_id():
        return [{"id": "http_server", "start": "myapp:Greeter", "args": {"greeting": "hi"}}]


    def twice():
        return [ChildSpec("g", "myapp:Greeter", {"greeting": "hi"}),
                ChildSpec("g", "myapp:Greeter", {"greeting": "ho"})]


    class Plain:
        """A class, but not an actor."""


    def not_an_actor():
        return [ChildSpec("greeter", "myapp:Plain")]


    def unpicklable():
        return [ChildSpec("greeter", "myapp:Greeter", {"greeting": lambda: "hi"})]
''')


class AppNode:
    """``python -m actors node start --app ...`` run from the app's directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "project"
        self.dir.mkdir()
        (self.dir / "myapp.py").write_text(APP)
        self.port = free_port()
        self.log = tmp_path / "node.log"
        self.store = self.dir / "store.db"
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env.update(OTPJOBS_RUNTIME_DIR=str(tmp_path / "run"), THESPLOG_FILE=str(tmp_path / "thespian.log"))
        self.proc: subprocess.Popen | None = None

    def args(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "actors",
            "node",
            "start",
            "--port",
            str(self.port),
            "--store",
            f"sqlite:///{self.store}",
            "--http-port",
            "0",
            *extra,
        ]

    def start(self, *extra: str) -> "AppNode":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.args(*extra), cwd=self.dir, env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
            )
        wait_until(lambda: "node_up" in self.log.read_text() or self.proc.poll() is not None, what="node_up")
        assert self.proc.poll() is None, self.log.read_text()
        return self

    def run(self, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.args(*extra), cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=60)

    def status(self) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "actors", "node", "status", "--port", str(self.port)],
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return json.loads(done.stdout)

    def runtime(self) -> dict:
        return json.loads((Path(self.env["OTPJOBS_RUNTIME_DIR"]) / f"node-{self.port}.json").read_text())


@pytest.fixture
def app_node(tmp_path, monkeypatch):
    node = AppNode(tmp_path)
    monkeypatch.setenv("OTPJOBS_RUNTIME_DIR", node.env["OTPJOBS_RUNTIME_DIR"])
    yield node
    if node.proc is not None and node.proc.poll() is None:
        node.proc.send_signal(signal.SIGTERM)
        node.proc.wait(60)
    runtime = Path(node.env["OTPJOBS_RUNTIME_DIR"]) / f"node-{node.port}.json"
    if runtime.exists():
        for pid in group_pids(json.loads(runtime.read_text())["pgid"]):
            os.kill(pid, signal.SIGKILL)


def test_app_children_start_last_answer_calls_restart_and_show_in_status(app_node):
    app_node.start("--app", "myapp:children")
    client = connect(app_node.port)
    assert client.call("greeter", ("hello", "ann")) == "hi, ann"
    ids = [child["id"] for child in app_node.status()["children"]]
    assert ids[-1] == "greeter" and "http_server" in ids, "after the built-in subsystems"
    old = client.call("greeter", ("pid",))
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: _pid_or_none(client) not in (None, old), what="greeter restarted")
    assert client.call("greeter", ("hello", "bo")) == "hi, bo"
    assert "app=myapp:children" in app_node.log.read_text()
    pgid = app_node.runtime()["pgid"]
    app_node.proc.send_signal(signal.SIGTERM)
    assert app_node.proc.wait(60) == 0
    wait_until(lambda: not group_pids(pgid), what="the app's processes gone with the node")


def _pid_or_none(client):
    try:
        return client.call("greeter", ("pid",), timeout=2)
    except Exception:  # noqa: BLE001 - restarting
        return None


@pytest.mark.slow
def test_app_from_the_config_file(app_node):
    ini = app_node.dir / "node.ini"
    ini.write_text("[node]\napp = myapp:children\n")
    app_node.start("--config", str(ini))
    assert connect(app_node.port).call("greeter", ("hello", "cy")) == "hi, cy"


@pytest.mark.parametrize(
    "app, expected",
    [
        ("nomodule:children", "no module named 'nomodule'"),
        ("myapp:missing", "has no attribute 'missing'"),
        ("myapp:not_a_list", "must return a list of child specs, not ChildSpec"),
        ("myapp:raises", "raised RuntimeError: no database configured"),
        ("myapp:typo", "child spec 0"),
        ("myapp:takes_a_name", "name 'scheduler' is already registered"),
        ("myapp:takes_an_id", "child id 'http_server' is already used by the node"),
        ("myapp:twice", "child id 'g' is already used by another child"),
        ("myapp:not_an_actor", "is not an actor class"),
        ("myapp:unpicklable", "args cannot be sent to the node"),
        ("myapp", "must be 'package.module:callable'"),
    ],
)
def test_a_bad_app_is_one_line_and_nothing_starts(app_node, app, expected):
    done = app_node.run("--app", app)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otpjobs: error: "), done.stderr
    assert expected in lines[0]
    assert not app_node.store.exists(), "nothing was created"
    assert not (Path(app_node.env["OTPJOBS_RUNTIME_DIR"]) / f"node-{app_node.port}.json").exists()
