"""Each process of a node writes its own log lines (supervision.logs): a
burst of records never waits for Thespian's logger process, and every line
arrives whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from supervision import ChildSpec, start_node
from supervision.testing import free_port, running_node
from tests import procs

from .fixtures import Worker


def _logger_process(pids: set[int]) -> int:
    """The node's Thespian logger process (its process title names it)."""
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"logger "):
                return pid
        except OSError:
            continue
    raise AssertionError(f"no logger process among {sorted(pids)}")


def test_a_burst_of_log_records_is_written_while_the_logger_process_is_stopped() -> None:
    """Through Thespian's logger, 3,000 records would fill the actor's
    transport queue (950 sends) and block it until the logger drained them:
    with the logger stopped, the call below never answered. Written by the
    actor's own process, they are all there, whole, and the call answers."""
    n = 3000
    with running_node([ChildSpec("w", Worker, {"id": "w"}, name="w")]) as node:
        logger = _logger_process(node.node.processes())
        os.kill(logger, signal.SIGSTOP)
        try:
            pid = node.call("w", ("log_burst", n), timeout=30)
        finally:
            os.kill(logger, signal.SIGCONT)
        lines = [e for e in node.events() if e.get("event") == "log" and "burst line" in e.get("message", "")]
        assert [e["message"] for e in lines] == [f"burst line {i} of {n}" for i in range(n)]
        assert {e["reporter_pid"] for e in lines} == {pid}


def test_records_that_do_not_format_are_written_as_the_forwarder_wrote_them() -> None:
    with running_node([ChildSpec("w", Worker, {"id": "w"}, name="w")]) as node:
        node.call("w", "log_bad_args")
        lines = [e["message"] for e in node.events() if e.get("event") == "log"]
    assert lines[-3:] == ["value <un-str-able argument>", "<un-str-able message>", "after"]


def test_a_log_file_that_cannot_be_opened_again_never_stops_an_actor_from_restarting(tmp_path) -> None:
    """Each new actor process opens the config's handlers; one that fails
    (its directory removed) logs through Thespian's logger instead, and the
    restarted child runs. The lines keep Thespian's ``actorAddress``."""
    logs = tmp_path / "logs"
    logs.mkdir()
    config = {
        "version": 1,
        "formatters": {"line": {"format": "%(levelname)s %(actorAddress)s %(message)s"}},
        "handlers": {"f": {"class": "logging.FileHandler", "filename": str(logs / "node.log"), "formatter": "line"}},
        "root": {"handlers": ["f"], "level": "WARNING"},
    }
    node = start_node(
        free_port(),
        {"strategy": "one_for_one", "intensity": 10, "period": 10},
        [ChildSpec("w", Worker, {"id": "w"}, name="w")],
        log_config=config,
        timeout=20,
    )
    try:
        client = node.client()
        client.call("w", ("log_burst", 1), 5)
        assert "WARNING ActorAddr-" in (logs / "node.log").read_text()
        (logs / "node.log").unlink()
        logs.rmdir()
        old = client.get_pid("w", 5)
        os.kill(old, signal.SIGKILL)
        procs.wait_until(lambda: _restarted(client, old), 20, "the child restarted")
        assert client.call("w", "ping", 5) == "pong"
    finally:
        node.stop()


def _restarted(client, old: int) -> bool:
    try:
        return client.get_pid("w", 2) != old
    except Exception:  # noqa: BLE001 - between two lives
        return False


_TWO_WRITERS = """
from supervision import ChildSpec
from supervision.testing import running_node
from tests.supervision.fixtures import Worker

specs = [ChildSpec(n, Worker, {{"id": n}}, name=n) for n in ("a", "b")]
with running_node(specs) as node:
    node.cast("a", ("log_long", {count}, {size}, "A"))
    node.cast("b", ("log_long", {count}, {size}, "B"))
    node.call("a", "ping", 120)
    node.call("b", "ping", 120)
"""


def test_long_lines_of_two_processes_arrive_whole_on_a_pipe() -> None:
    """Two actors write 9 KB records at once to the node's stderr, a pipe
    read slowly (so that it fills and a writer blocks inside a record): past
    4,096 bytes a pipe write is not atomic, and without the node's line lock
    the other's lines land inside it. Every record arrives whole."""
    count, size = 150, 9000
    proc = subprocess.Popen(
        [sys.executable, "-c", _TWO_WRITERS.format(count=count, size=size)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    chunks = []
    try:
        while chunk := proc.stderr.read1(4096):
            chunks.append(chunk)
            time.sleep(0.0005)
    finally:
        proc.stderr.close()
        assert proc.wait(timeout=120) == 0
    lines = [line for line in b"".join(chunks).decode().splitlines() if "supervision.long" in line]
    for tag in "AB":
        mine = [line for line in lines if f" {tag} " in line[:200]]
        assert len(mine) == count
        for i, line in enumerate(mine):
            assert line.endswith(f" {tag} {i} {tag * size} {tag} end"), line[:120] + " ... " + line[-120:]
    assert len(lines) == 2 * count
