"""a cleanly stopped node hands its documents back due
HAND_BACK_AFTER later, but its job hosts are stopped one after the
other (JobHostSup stops its children in reverse order, each host's
terminate giving its runs up to STOP_GRACE): a run on host 0 is told to
stop only once hosts 3..1 have ended. With documents on three hosts, each
taking 3.5 s to stop, the last one runs on past the hand-back: the other
node runs the same document at the same time.
"""

from __future__ import annotations

import signal

import pytest

from .jobs_fixtures import wait_until
from .test_docs_failover import CliNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

N = 3


def test_documents_on_several_hosts_of_a_stopped_node_never_run_twice(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    a = CliNode(url, tmp_path, "a", owner_timeout=30)  # the default; its lease fence (24 s) stops nothing here
    b = None
    logs = [tmp_path / f"d{i}.log" for i in range(N)]

    def lines(i):
        return [line.split() for line in logs[i].read_text().splitlines()] if logs[i].exists() else []

    def starts(i):
        return [line for line in lines(i) if line[0] == "start"]

    try:
        a.wait_up()
        for i in range(N):
            body = {
                "handler": "tests.actors.scheduler_fixtures:lingering",
                "continuous": True,
                "isolation": "thread",
                "options": {"log": str(logs[i]), "linger": 3.5},
            }
            assert a.request("PUT", f"/_replicator/d{i}", body)[0] == 201
        wait_until(lambda: all(starts(i) for i in range(N)), 30, "the documents to start on a", step=0.05)
        b = CliNode(url, tmp_path, "b", owner_timeout=30).wait_up()
        a.proc.send_signal(signal.SIGTERM)
        assert a.proc.wait(60) == 0
        wait_until(lambda: all(len(starts(i)) == 2 for i in range(N)), 40, "b to run every document", step=0.05)
    finally:
        for n in (a, b):
            if n is not None and n.proc.poll() is None:
                n.kill()
    overlaps = {}
    for i in range(N):
        ends = [float(line[1]) for line in lines(i) if line[0] == "end"]
        second = max(float(line[1]) for line in starts(i))
        if ends and second < ends[0]:
            overlaps[f"d{i}"] = round(ends[0] - second, 2)
    assert not overlaps, f"documents ran on both nodes at once (seconds of overlap): {overlaps}"
