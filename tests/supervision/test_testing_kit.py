"""``supervision.testing`` on real trees of every strategy: the kit a user's
tests get (``running_node`` and the ``otp_node`` fixture of the pytest plugin).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from supervision import ChildSpec
from supervision.testing import LeakedProcesses, running_node

W = "tests.supervision.fixtures:Worker"
SUP = "tests.supervision.fixtures:Sup"


def worker(ident: str, **kw) -> ChildSpec:
    return ChildSpec(ident, W, {"id": ident}, name=ident, **kw)


def pids(node, *names) -> dict:
    return {n: node.pid(n) for n in names}


@pytest.mark.parametrize(
    "strategy, victim, restarted",
    [
        ("one_for_one", "b", {"b"}),
        ("one_for_all", "b", {"a", "b", "c"}),
        ("rest_for_one", "b", {"b", "c"}),
    ],
)
def test_sigkill_of_a_worker_restarts_what_the_strategy_says(otp_node, strategy, victim, restarted):
    node = otp_node([worker("a"), worker("b"), worker("c")], {"strategy": strategy, "intensity": 5, "period": 10})
    before = pids(node, "a", "b", "c")
    assert node.kill(victim) == before[victim]
    node.wait_restarted(victim, before[victim])
    for name in "abc":
        if name in restarted:
            node.wait_restarted(name, before[name])
    after = pids(node, "a", "b", "c")
    assert {n for n in "abc" if after[n] != before[n]} == restarted
    assert all(node.call(n, "ping") == "pong" for n in "abc")
    exited = [e for e in node.events() if e["event"] == "child_exited" and e["child"] == victim]
    assert exited and exited[0]["reason"] == "killed" and exited[0]["supervisor"] == "supervision.node"


@pytest.mark.slow
def test_exit_with_a_reason_is_reported_with_it_and_the_worker_restarts(otp_node):
    node = otp_node([worker("a")])
    old = node.pid("a")
    node.exit("a", "boom")
    assert node.wait_restarted("a", old) != old
    event = node.wait_event(lambda e: e["event"] == "child_exited" and e["child"] == "a", what="a's exit")
    assert event["reason"] == "boom"
    node.exit("a", "normal")  # erlang:exit(Pid, normal) does nothing to a process that does not trap exits
    assert node.pid("a") != old and node.call("a", "ping") == "pong"


def test_a_trapping_worker_gets_the_exit_as_a_message(otp_node):
    node = otp_node([ChildSpec("t", W, {"id": "t", "trap": True}, name="t")])
    old = node.pid("t")
    node.exit("t", "please")
    events = node.call("t", "events")
    assert [e.reason for e in events] == ["please"] and node.pid("t") == old


@pytest.mark.slow
def test_wait_restarted_names_what_the_supervisor_did_instead(otp_node):
    node = otp_node([worker("tmp", restart="temporary")])
    old = node.kill("tmp")
    with pytest.raises(AssertionError) as caught:
        node.wait_restarted("tmp", old, timeout=1.0)
    assert "child_exited" in str(caught.value) and "tmp" in str(caught.value) and "killed" in str(caught.value)


def test_sigkill_of_a_nested_supervisor_restarts_it_and_its_children(otp_node):
    inner = {"id": "inner", "flags": {"strategy": "one_for_one"}, "specs": [worker("leaf")]}
    node = otp_node([ChildSpec("inner", SUP, inner, type="supervisor", name="inner"), worker("other")])
    before = pids(node, "inner", "leaf", "other")
    node.exit("inner", "kill")
    node.wait_restarted("inner", before["inner"])
    node.wait_restarted("leaf", before["leaf"])
    assert node.pid("other") == before["other"]
    assert node.call("leaf", "ping") == "pong"


def test_restart_intensity_reached_is_reported_as_the_escalation(otp_node):
    inner = {
        "id": "inner",
        "flags": {"strategy": "one_for_one", "intensity": 1, "period": 30},
        "specs": [worker("leaf")],
    }
    node = otp_node(
        [ChildSpec("inner", SUP, inner, type="supervisor", name="inner")],
        {"strategy": "one_for_one", "intensity": 5, "period": 30},
    )
    first_sup = node.pid("inner")
    old = node.kill("leaf")
    node.wait_restarted("leaf", old)
    node.kill("leaf")  # the second restart in the period: more than intensity 1
    gave_up = node.wait_event(lambda e: e["event"] == "max_intensity", what="max_intensity")
    assert gave_up["supervisor"] == "inner"
    assert node.wait_restarted("inner", first_sup) != first_sup, "the root restarted the escalating supervisor"
    assert node.call("leaf", "ping") == "pong"


def test_the_root_giving_up_ends_the_node(otp_node):
    node = otp_node([worker("a")], {"strategy": "one_for_one", "intensity": 0, "period": 30})
    node.kill("a")
    node.wait_event(
        lambda e: e["event"] == "max_intensity" and e["supervisor"] == "supervision.node",
        what="the root's max_intensity",
    )
    deadline = time.monotonic() + 5
    while node.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not node.alive()


def test_a_node_whose_root_gave_up_is_stopped_at_once():
    """Nothing is left to shut down in order: the stop does not wait on the
    gone root (it used to wait 5 s for a lookup of it)."""
    with running_node([worker("a")], {"strategy": "one_for_one", "intensity": 0, "period": 30}) as node:
        node.kill("a")
        deadline = time.monotonic() + 10
        while node.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not node.alive()
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 2


def test_a_manual_clock_fires_timers_only_when_advanced(otp_node):
    node = otp_node([ChildSpec("c", W, {"id": "c"}, name="c", clock="manual")])
    node.call("c", ("timer", 60.0, "tick"))
    assert node.call("c", "events") == []
    node.advance("c", 59.0)
    assert node.call("c", "events") == []
    node.advance("c", 1.0)
    assert node.call("c", "events") == [("timer_fired", "tick")]


@pytest.mark.slow
def test_a_node_whose_process_leaks_is_reported_and_the_leak_killed():
    with pytest.raises(LeakedProcesses) as caught:
        with running_node([ChildSpec("l", "tests.supervision.fixtures:Leaker", {"id": "l"}, name="l")]) as node:
            assert node.call("l", "ping") == "pong"
    message = str(caught.value)
    assert "sleep 120" in message
    leaked = [int(part.split()[0]) for part in message.split(": ", 1)[1].split(", ")]
    assert leaked and not any(os.path.exists(f"/proc/{pid}") and _not_zombie(pid) for pid in leaked)


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_users_test_file_passes_in_a_fresh_directory_with_only_the_package_installed(tmp_path):
    (tmp_path / "myapp.py").write_text(
        textwrap.dedent("""
        from supervision import GenServer

        class Counter(GenServer):
            def init(self, args):
                self.n = 0

            def handle_call(self, msg, frm):
                if msg == "incr":
                    self.n += 1
                return self.n
    """)
    )
    (tmp_path / "test_myapp.py").write_text(
        textwrap.dedent("""
        from supervision import ChildSpec

        def test_the_counter_restarts_from_zero(otp_node):
            node = otp_node([ChildSpec("counter", "myapp:Counter", name="counter")])
            assert node.call("counter", "incr") == 1
            old = node.kill("counter")
            node.wait_restarted("counter", old)
            assert node.call("counter", "get") == 0
    """)
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["THESPLOG_FILE"] = str(tmp_path / "thespian.log")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_myapp.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
