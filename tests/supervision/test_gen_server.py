"""gen_server behaviour: bad messages, calls, links, trap_exit, monitors, SIGKILL, timers, names."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from supervision import BadCall, BadCast, BadInfo, CallFailed, CallTimeout, Down, Exit, NoProc
from tests.supervision.conftest import alive, wait_until
from tests.supervision.fixtures import Probe

ONE = {"strategy": "one_for_one", "intensity": 10, "period": 10}


def probe_and(tree, *specs):
    """A supervisor with a Probe 'p' first, then ``specs``; {id: ChildInfo}."""
    sup = tree.sup(ONE, [tree.w("p", cls=Probe), *specs])
    return sup, tree.kids(sup)


def restarted(tree, sup, ident, old_pid):
    return wait_until(
        lambda: (k := tree.kids(sup)[ident]).addr is not None and k.pid != old_pid and k, 5, f"restart of {ident}"
    )


def downs(tree, probe_addr, n=1):
    return wait_until(
        lambda: (e := [x for x in tree.c.call(probe_addr, "events") if isinstance(x, Down)]) and len(e) >= n and e,
        5,
        "Down",
    )


# ------------------------------------------------------------ bad messages
@pytest.mark.parametrize("kind", ["call", "cast", "info"])
def test_unknown_message_crashes_with_bad_message_reason_and_is_restarted(tree, kind):
    sup, kids = probe_and(tree, tree.w("w"))
    ref = tree.c.call(kids["p"].addr, ("monitor_sync", kids["w"].addr))
    expected = {"call": BadCall, "cast": BadCast, "info": BadInfo}[kind]
    if kind == "call":
        with pytest.raises(CallFailed) as info:
            tree.c.call(kids["w"].addr, "nonsense")
        assert isinstance(info.value.reason, BadCall)
    elif kind == "cast":
        tree.c.cast(kids["w"].addr, "nonsense")
    else:
        tree.c.send(kids["w"].addr, "nonsense")
    [down] = downs(tree, kids["p"].addr)
    assert down.ref == ref and type(down.reason) is expected and down.reason.msg == "nonsense"
    restarted(tree, sup, "w", kids["w"].pid)


# ------------------------------------------------------------------- calls
def test_call_to_crashing_handler_raises_call_failed_with_the_exception(tree):
    sup, kids = probe_and(tree, tree.w("w"))
    with pytest.raises(CallFailed) as info:
        tree.c.call(kids["w"].addr, "crash")
    assert isinstance(info.value.reason, ValueError) and str(info.value.reason) == "crash on purpose"
    restarted(tree, sup, "w", kids["w"].pid)


def test_call_without_reply_raises_call_timeout(tree):
    sup, kids = probe_and(tree, tree.w("w"))
    t = time.monotonic()
    with pytest.raises(CallTimeout):
        tree.c.call(kids["w"].addr, "defer", timeout=0.3)
    assert 0.3 <= time.monotonic() - t < 2
    assert tree.c.call(kids["w"].addr, "pid") == kids["w"].pid


def test_a_deferred_call_fails_with_the_reason_when_the_server_exits_first(tree):
    sup, kids = probe_and(tree, tree.w("w"))
    outcome: list = []
    caller = threading.Thread(target=lambda: outcome.append(_call_outcome(tree, kids["w"].addr, "defer")))
    caller.start()
    wait_until(lambda: tree.c.call(kids["w"].addr, "has_deferred"), 5, "the call to be deferred")
    t = time.monotonic()
    tree.c.cast(kids["w"].addr, "nonsense")  # BadCast: the server exits before answering
    caller.join(15)
    [error] = outcome
    assert isinstance(error, CallFailed) and isinstance(error.reason, BadCast), error
    assert time.monotonic() - t < 2, "told at once, not left to its 10 s timeout"
    restarted(tree, sup, "w", kids["w"].pid)


def test_a_call_answered_before_its_handler_returns_is_not_left_open(tree):
    """A handler may reply() and then return NOREPLY (a supervisor's refused
    op does); its caller is answered once, and the server's exit later sends
    it nothing (an exit used to wait 5 s on a CallError to the gone caller)."""
    sup, kids = probe_and(tree, tree.w("w", restart="temporary"))
    addr, pid = kids["w"].addr, kids["w"].pid
    assert tree.c.call(addr, "answer_now") == "early"
    assert tree.c.call(addr, "open_calls") == 0
    tree.c.call(addr, ("stop", "normal"))
    t = time.monotonic()
    wait_until(lambda: not alive(pid), 10, "the server's process to exit")
    assert time.monotonic() - t < 2, "its exit waited on a message to a caller long gone"


def _call_outcome(tree, addr, msg):
    try:
        return tree.c.call(addr, msg, timeout=10)
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
        return exc


def test_call_to_unknown_name_raises_noproc_promptly(tree):
    t = time.monotonic()
    with pytest.raises(NoProc):
        tree.c.call("no-such-name", "ping")
    assert time.monotonic() - t < 1


def test_call_to_dead_address_raises_noproc_promptly(tree):
    sup, kids = probe_and(tree, tree.w("w", restart="temporary"))
    tree.c.terminate_child(sup, "w")
    wait_until(lambda: not alive(kids["w"].pid), 5, "w to exit")
    t = time.monotonic()
    with pytest.raises(NoProc):
        tree.c.call(kids["w"].addr, "ping")
    assert time.monotonic() - t < 1


# -------------------------------------------------------------------- links
def test_linked_worker_dies_with_the_same_abnormal_reason(tree):
    sup, kids = probe_and(tree, tree.w("a", cls=Probe), tree.w("b"))
    tree.c.call(kids["a"].addr, ("link_sync", kids["b"].addr))
    tree.c.call(kids["p"].addr, ("monitor_sync", kids["a"].addr))
    with pytest.raises(CallFailed):
        tree.c.call(kids["b"].addr, "crash")
    [down] = downs(tree, kids["p"].addr)
    assert isinstance(down.reason, ValueError) and str(down.reason) == "crash on purpose"
    restarted(tree, sup, "a", kids["a"].pid)
    restarted(tree, sup, "b", kids["b"].pid)


def test_normal_exit_does_not_propagate_over_a_link(tree):
    sup, kids = probe_and(tree, tree.w("a", cls=Probe), tree.w("b"))
    tree.c.call(kids["a"].addr, ("link_sync", kids["b"].addr))
    tree.c.call(kids["p"].addr, ("monitor_sync", kids["a"].addr))
    tree.c.call(kids["b"].addr, ("stop", "normal"))
    restarted(tree, sup, "b", kids["b"].pid)
    assert tree.c.call(kids["a"].addr, "pid") == kids["a"].pid
    assert tree.c.call(kids["p"].addr, "events") == []


def test_trapping_worker_receives_exit_as_a_message(tree):
    sup, kids = probe_and(tree, tree.w("a", cls=Probe, trap=True), tree.w("b"))
    tree.c.call(kids["a"].addr, ("link_sync", kids["b"].addr))
    with pytest.raises(CallFailed):
        tree.c.call(kids["b"].addr, "crash")
    [ex] = wait_until(lambda: tree.c.call(kids["a"].addr, "events"), 5, "Exit message")
    assert isinstance(ex, Exit) and ex.addr == kids["b"].addr and isinstance(ex.reason, ValueError)
    assert tree.c.call(kids["a"].addr, "pid") == kids["a"].pid


# ----------------------------------------------------------------- monitors
def test_monitor_delivers_one_down_with_the_reason(tree):
    sup, kids = probe_and(tree, tree.w("w"))
    ref = tree.c.call(kids["p"].addr, ("monitor_sync", kids["w"].addr))
    tree.c.call(kids["w"].addr, ("stop", "bye"))
    [down] = downs(tree, kids["p"].addr)
    assert (down.ref, down.addr, down.reason) == (ref, kids["w"].addr, "bye")
    restarted(tree, sup, "w", kids["w"].pid)
    tree.c.call(kids["p"].addr, ("timer", 0.05, "later"))
    wait_until(lambda: len(tree.c.call(kids["p"].addr, "events")) == 2, 5, "a later event")
    assert [e for e in tree.c.call(kids["p"].addr, "events") if isinstance(e, Down)] == [down]


def test_monitor_on_an_already_dead_actor_gives_down_noproc(tree):
    sup, kids = probe_and(tree, tree.w("w", restart="temporary"))
    tree.c.terminate_child(sup, "w")
    wait_until(lambda: not alive(kids["w"].pid), 5, "w to exit")
    ref = tree.c.call(kids["p"].addr, ("monitor_sync", kids["w"].addr))
    [down] = downs(tree, kids["p"].addr)
    assert (down.ref, down.reason) == (ref, "noproc")


# ------------------------------------------------------------------ SIGKILL
def test_sigkilled_worker_is_restarted_with_reason_killed(tree):
    sup, kids = probe_and(tree, tree.w("w"))
    ref = tree.c.call(kids["p"].addr, ("monitor_sync", kids["w"].addr))
    os.kill(kids["w"].pid, signal.SIGKILL)
    [down] = downs(tree, kids["p"].addr)
    assert (down.ref, down.reason) == (ref, "killed")
    restarted(tree, sup, "w", kids["w"].pid)


def nested_tree(tree):
    inner = tree.sup_spec("n", ONE, [tree.w("n1"), tree.w("n2")])
    sup, kids = probe_and(tree, inner, tree.w("x"))
    grand = tree.kids(kids["n"].addr)
    return sup, kids, grand


def test_sigkilled_nested_supervisor_takes_its_children_and_is_restarted_fresh(tree):
    sup, kids, grand = nested_tree(tree)
    os.kill(kids["n"].pid, signal.SIGKILL)
    wait_until(
        lambda: not alive(grand["n1"].pid) and not alive(grand["n2"].pid),
        5,
        "the killed supervisor's children to die (no orphans)",
    )
    new = restarted(tree, sup, "n", kids["n"].pid)
    fresh = tree.kids(new.addr)
    assert all(alive(fresh[i].pid) and fresh[i].pid != grand[i].pid for i in ("n1", "n2"))
    assert tree.kids(sup)["x"].pid == kids["x"].pid
    assert tree.lines()[-3:] == ["start n", "start n1", "start n2"]


def test_monitor_of_a_grandchild_fires_when_its_supervisor_is_sigkilled(tree):
    sup, kids, grand = nested_tree(tree)
    ref = tree.c.call(kids["p"].addr, ("monitor_sync", grand["n1"].addr))
    # n1 tells n of its watcher, n tells sup: a round trip through each lets
    # that news arrive before the SIGKILL (a SIGKILL sooner loses the Down).
    tree.kids(kids["n"].addr)
    tree.kids(sup)
    os.kill(kids["n"].pid, signal.SIGKILL)
    restarted(tree, sup, "n", kids["n"].pid)
    [down] = downs(tree, kids["p"].addr)
    assert (down.ref, down.reason) == (ref, "killed")


# ------------------------------------------------------------------- timers
def test_send_after_delivers_the_message(tree):
    sup, kids = probe_and(tree)
    tree.c.call(kids["p"].addr, ("timer", 0.05, "t1"))
    assert wait_until(lambda: tree.c.call(kids["p"].addr, "events"), 5, "timer") == [("timer_fired", "t1")]


def test_a_timer_past_any_date_keeps_the_actor_alive(tree):
    """Thespian turns a delay into a date (year 9999 at most): a timer of
    10^12 s is armed in steps, the actor lives on and its other timers fire."""
    sup, kids = probe_and(tree)
    pid = kids["p"].pid
    tree.c.call(kids["p"].addr, ("timer", 1e12, "never"))
    tree.c.call(kids["p"].addr, ("timer", 0.05, "soon"))
    assert wait_until(lambda: tree.c.call(kids["p"].addr, "events"), 5, "timer") == [("timer_fired", "soon")]
    assert tree.c.get_pid(kids["p"].addr) == pid, "the same process: it never crashed"


def test_cancel_timer_prevents_delivery(tree):
    sup, kids = probe_and(tree)
    token = tree.c.call(kids["p"].addr, ("timer", 0.05, "cancelled"))
    assert tree.c.call(kids["p"].addr, ("cancel", token)) is True
    tree.c.call(kids["p"].addr, ("timer", 0.2, "later"))
    wait_until(lambda: tree.c.call(kids["p"].addr, "events"), 5, "the later timer")
    assert tree.c.call(kids["p"].addr, "events") == [("timer_fired", "later")]
    assert tree.c.call(kids["p"].addr, ("cancel", token)) is False


def test_manual_clock_timers_fire_only_on_advance_clock(tree):
    """A child spawned with clock='manual' (as ChildSpec(clock="manual") gives) runs timers on advance only."""
    sup, kids = probe_and(tree)
    m = tree.c.call(kids["p"].addr, ("spawn_manual", {"id": "m"}))
    tree.c.call(m, ("timer", 0.01, "t"))
    tree.c.call(m, ("timer", 10, "t10"))
    real = time.monotonic()
    wait_until(lambda: time.monotonic() - real > 0.05, 1, "real time to pass the timer's delay")
    assert tree.c.call(m, "events") == []
    assert tree.c.advance_clock(m, 5) == 5
    assert tree.c.call(m, "events") == [("timer_fired", "t")]
    tree.c.advance_clock(m, 5)
    assert tree.c.call(m, "events") == [("timer_fired", "t"), ("timer_fired", "t10")]


# -------------------------------------------------------------------- names
def test_whereis_returns_the_current_address_after_a_restart(tree):
    name = f"named-{os.getpid()}-{time.monotonic_ns()}"
    sup, kids = probe_and(tree, tree.w("w", name=name))
    assert tree.c.whereis(name) == kids["w"].addr
    with pytest.raises(CallFailed):
        tree.c.call(name, "crash")
    new = restarted(tree, sup, "w", kids["w"].pid)
    assert wait_until(lambda: tree.c.whereis(name) == new.addr, 5, "the name to follow the restart")
    assert tree.c.call(name, "pid") == new.pid


def test_whereis_returns_none_after_terminate_child(tree):
    name = f"named-{os.getpid()}-{time.monotonic_ns()}"
    sup, kids = probe_and(tree, tree.w("w", name=name))
    tree.c.terminate_child(sup, "w")
    assert wait_until(lambda: tree.c.whereis(name) is None, 5, "the name to go")
    with pytest.raises(NoProc):
        tree.c.call(name, "ping")
