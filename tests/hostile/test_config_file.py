"""Bad config files, through every command that reads one.

``otpjobs node start``, ``otpjobs jobs ...`` and ``otpjobs worker`` read the
same file (``--config``). A file that is malformed, or holds a value its
setting refuses, stops each of them before anything starts: exit status 2,
one line on stderr naming the file and line (malformed) or the section,
key and value (refused), and no store created. The run-time side of the
same settings (``PUT /_node/_local/_config``) is tests/hostile/test_http.py
(random values) and tests/actors/test_http_config.py (an example table,
checked in the store, the file and the actors).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import free_port

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]

#: The commands that read a config file, with what each needs besides it.
COMMANDS = {
    "node start": ["node", "start", "--port", "{port}"],
    "jobs list": ["jobs", "list"],
    "worker": ["worker", "--port", "{port}", "t=json:dumps"],
}


def run(tmp_path: Path, text: str, command: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """Run ``command`` with a config file holding ``text`` and a store in ``tmp_path``."""
    ini, store = tmp_path / "node.ini", tmp_path / "store.db"
    ini.write_text(text)
    argv = [a.format(port=free_port()) for a in COMMANDS[command]]
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        OTPJOBS_RUNTIME_DIR=str(tmp_path / "run"),
        THESPLOG_FILE=str(tmp_path / "thespian.log"),
    )
    out = subprocess.run(
        [sys.executable, "-m", "actors", *argv, "--config", str(ini), "--store", f"sqlite:///{store}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out, ini, store


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    "text, says",
    [
        ("port = 5\n", "line 1: a setting before any [section] header: 'port = 5'"),
        ("[node]\nport = 5\nport = 6\n", "line 3: [node] port is set twice"),
        ("[node]\nport\n", "line 2: not a 'key = value' setting: 'port'"),
        ("[node]\n[node]\n", "line 2: section [node] appears twice"),
    ],
    ids=["before-header", "twice", "not-a-setting", "section-twice"],
)
def test_a_malformed_file_is_one_line_naming_file_and_line(tmp_path, command, text, says) -> None:
    out, ini, store = run(tmp_path, text, command)
    assert out.returncode == 2 and out.stderr.strip() == f"otpjobs: error: config file {ini}, {says}", out.stderr
    assert not store.exists()


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    "text, says",
    [
        ("[replicator]\nmax_jobs = lots\n", "[replicator] max_jobs = 'lots': must be an integer"),
        (
            "[replicator]\nhandlers = myapp.jobs, not a handler!\n",
            "[replicator] handlers = 'myapp.jobs, not a handler!': entry 'not a handler!' is not 'package.module' or "
            "'package.module:callable'",
        ),
        (
            "[replicator]\nhandlers = os:\n",
            "[replicator] handlers = 'os:': entry 'os:' is not 'package.module' or 'package.module:callable'",
        ),
        (
            "[replicator]\nstores = sqlite:////var/lib/otpjobs\n",
            "[replicator] stores = 'sqlite:////var/lib/otpjobs': entry 'sqlite:////var/lib/otpjobs': "
            "give the directory holding SQLite stores, not a sqlite: URL",
        ),
    ],
    ids=["not-an-int", "bad-handler", "handler-no-callable", "store-url"],
)
def test_a_value_its_setting_refuses_is_one_line_naming_it(tmp_path, command, text, says) -> None:
    out, _, store = run(tmp_path, text, command)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"otpjobs: error: {says}", out.stderr
    assert not store.exists()
