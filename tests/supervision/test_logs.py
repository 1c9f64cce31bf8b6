"""Each process of a node writes its own log lines (supervision.logs): a
burst of records never waits for Thespian's logger process, and every line
arrives whole."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from supervision import ChildSpec
from supervision.testing import running_node

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
