"""A child's exit reason reaches its supervisor (issue 27, item 4: the
``shutdown_error ... child=couch_jobs_sup reason=killed`` of a node stopped
by SIGTERM).

Two Thespian behaviours made a clean exit look like a SIGKILL:

* an exiting actor stopped sending its last messages (its ``Exit``) as soon
  as one of its timers came due (:mod:`supervision.drain`): a supervisor
  exiting with the reap checks of its brutal-killed children pending, to a
  parent slow to take the message, lost its ``Exit``;
* the child's goodbye (``ChildActorExited`` from the child itself) travels
  on a connection of its own and can overtake its ``Exit``.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from thespian.actors import ActorAddress, ChildActorExited

from supervision import ChildSpec, GenServer
from supervision import messages as m
from supervision.addrmap import AddrMap
from supervision.reasons import KILLED
from supervision.testing import running_node

W = "tests.supervision.fixtures:Worker"
SUP = "tests.supervision.fixtures:Sup"


@pytest.mark.slow
def test_an_exit_sent_while_a_timer_comes_due_reaches_a_parent_slow_to_take_it():
    inner = {
        "id": "inner",
        "flags": {"strategy": "one_for_one", "intensity": 5, "period": 10},
        "specs": [ChildSpec("w", W, {"id": "w"}, name="w")],
    }
    with running_node([ChildSpec("inner", SUP, inner, type="supervisor", name="inner")]) as node:
        w, parent = node.client.whereis("w"), node.pid("inner")
        old = node.pid(w)
        node.call(w, ("timer", 0.3, "due while it exits"))
        os.kill(parent, signal.SIGSTOP)  # the parent cannot take the Exit until the timer is past due
        try:
            assert node.call(w, ("stop", "bye")) == "stopping"
            time.sleep(1.0)  # the fault window: the child exits, its timer comes due, the parent sleeps
        finally:
            os.kill(parent, signal.SIGCONT)
        exited = node.wait_event(lambda e: e["event"] == "child_exited" and e["child"] == "w", what="w's exit")
        assert exited["reason"] == "bye", "the reason the child exited with, not killed"
        node.wait_restarted("w", old)


class Recorder(GenServer):
    """A GenServer outside Thespian: its children's exits and its timers are recorded."""

    def child_exited(self, addr, reason):  # noqa: ANN001
        self.exits.append(reason)


def recorder():
    server = Recorder()
    server.exits, server.due = [], []
    server.start_timer = lambda delay, callback, real=False: server.due.append(callback)
    child = ActorAddress("child")
    server._children[child] = {"pid": 1, "watchers": None, "descendants": AddrMap()}
    return server, child


def test_a_goodbye_that_overtakes_the_exit_waits_for_its_reason():
    server, child = recorder()
    server._route(ChildActorExited(child), child)  # the child's own goodbye, first
    assert server.exits == [] and len(server.due) == 1
    server._route(ChildActorExited(child), ActorAddress("me"))  # the SIGCHLD check: still waiting
    assert server.exits == []
    server._route(m.Exit(child, "shutdown"), child)
    assert server.exits == ["shutdown"]
    server.due[0]()
    assert server.exits == ["shutdown"], "the grace timer finds it handled"


def test_a_goodbye_with_no_exit_after_it_is_killed_once_the_grace_is_over():
    server, child = recorder()
    server._route(ChildActorExited(child), child)
    server.due[0]()
    assert server.exits == [KILLED]


def test_a_child_gone_without_a_goodbye_is_killed_at_once():
    server, child = recorder()
    server._route(ChildActorExited(child), ActorAddress("me"))
    assert server.exits == [KILLED] and server.due == []


def test_a_start_failure_that_comes_after_the_goodbye_is_the_reason():
    server, child = recorder()
    server._route(ChildActorExited(child), child)
    server._route(m.StartFailed(child, "init failed"), child)
    assert server.exits == ["init failed"]
