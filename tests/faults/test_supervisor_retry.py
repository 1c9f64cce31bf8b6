"""A restart that fails because a sibling died too must not retry for ever.

Found by the chaos run: scheduler_sup was SIGKILLed while scheduler_tree
(rest_for_one) restarted the scheduler after an earlier kill; the
scheduler's start failed ("scheduler_sup is not running") and was retried
on the spot, again and again, slower than the restart intensity, while
scheduler_sup's exit waited behind the retries: the node had no scheduler
for good. Here the same shape with two small actors, on a real node: the
dependent child takes half a second to start, its sibling is killed during
that start, and the pair must be running again soon after.
"""

from __future__ import annotations

import logging
import os
import signal
import uuid

import pytest

from supervision import ChildSpec, Supervisor, start_node
from tests.procs import free_port, group_pids, pid_alive, proc_stat, wait_until

from .siblings import NeedsSibling, Sibling

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def node():
    n = start_node(free_port(), {"strategy": "one_for_one", "intensity": 1000, "period": 1}, [], level=logging.CRITICAL)
    try:
        yield n
    finally:
        pgid = n.pgid
        n.stop()
        wait_until(lambda: not group_pids(pgid), 15, "no process of the node left")


def test_a_restart_failing_because_a_sibling_died_too_handles_that_exit_first(node):
    client = node.client()
    name = f"sibling-{uuid.uuid4().hex[:8]}"
    flags = {"strategy": "rest_for_one", "intensity": 1000, "period": 1}
    specs = [ChildSpec("s", Sibling, None, name=name), ChildSpec("c", NeedsSibling, {"sibling": name, "delay": 0.5})]
    sup = client.start_child(
        client.node, ChildSpec("pair", Supervisor, (flags, specs), restart="temporary", type="supervisor")
    )
    sup_pid = client.get_pid(sup)
    s_pid, c_pid = (row.pid for row in client.which_children(sup))

    os.kill(c_pid, signal.SIGKILL)

    def restarting_c() -> int | None:  # the new c, still in its half-second start
        kids = [p for p in group_pids(node.pgid) if (proc_stat(p) or ("", 0, 0))[1] == sup_pid]
        return next((p for p in kids if p not in (s_pid, c_pid)), None)

    wait_until(restarting_c, 10, "c to be restarting", step=0.005)
    os.kill(s_pid, signal.SIGKILL)  # its exit reaches the supervisor while c's restart runs

    def whole() -> bool:
        rows = client.which_children(sup)
        return all(r.addr is not None and pid_alive(r.pid) for r in rows) and {r.pid for r in rows}.isdisjoint(
            {s_pid, c_pid}
        )

    wait_until(whole, 15, "s and c to run again", step=0.05, ignore=(Exception,))
    assert client.call(name, "pid") == next(r.pid for r in client.which_children(sup) if r.id == "s")
    client.terminate_child(client.node, "pair")
