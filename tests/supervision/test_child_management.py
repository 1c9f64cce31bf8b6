"""terminate/restart/delete_child, which/count_children, shutdown timeouts, bad input."""

from __future__ import annotations

import os
import signal
import time

import pytest

from supervision import AlreadyStarted, BadChildSpec, ChildSpec, NoProc, StartError, SupervisionError, SupFlags
from tests.supervision.conftest import alive, wait_until
from tests.supervision.fixtures import DeafSup, KillingSup, Worker

ONE = {"strategy": "one_for_one", "intensity": 10, "period": 10}


def test_which_children_lists_children_in_start_order_with_types(tree):
    inner = tree.sup_spec("n", ONE, [])
    sup = tree.sup(ONE, [tree.w("a"), inner, tree.w("b")])
    rows = tree.c.which_children(sup)
    assert [(r.id, r.type) for r in rows] == [("a", "worker"), ("n", "supervisor"), ("b", "worker")]
    assert all(alive(r.pid) and r.addr is not None for r in rows)


def test_count_children_counts_specs_active_supervisors_and_workers(tree):
    sup = tree.sup(ONE, [tree.w("a"), tree.sup_spec("n", ONE, []), tree.w("b")])
    tree.c.terminate_child(sup, "b")
    assert tree.c.count_children(sup) == {"specs": 3, "active": 2, "supervisors": 1, "workers": 2}


def test_terminate_child_stops_it_and_keeps_its_spec(tree):
    sup = tree.sup(ONE, [tree.w("a"), tree.w("b")])
    b = tree.kids(sup)["b"]
    assert tree.c.terminate_child(sup, "b") is True
    assert [(r.id, r.addr) for r in tree.c.which_children(sup)][1] == ("b", None)
    assert tree.lines()[-1] == "stop b"
    wait_until(lambda: not alive(b.pid), 5, "b to exit")


def test_terminate_child_of_a_temporary_child_removes_its_spec(tree):
    sup = tree.sup(ONE, [tree.w("a"), tree.w("t", restart="temporary")])
    tree.c.terminate_child(sup, "t")
    assert list(tree.kids(sup)) == ["a"]


def test_restart_child_starts_a_terminated_child_again(tree):
    sup = tree.sup(ONE, [tree.w("a"), tree.w("b")])
    old = tree.kids(sup)["b"]
    tree.c.terminate_child(sup, "b")
    addr = tree.c.restart_child(sup, "b")
    new = tree.kids(sup)["b"]
    assert new.addr == addr and alive(new.pid) and new.pid != old.pid
    assert tree.lines()[-2:] == ["stop b", "start b"]


def test_restart_child_of_a_running_child_raises(tree):
    sup = tree.sup(ONE, [tree.w("a")])
    with pytest.raises(AlreadyStarted):
        tree.c.restart_child(sup, "a")


def test_delete_child_of_a_running_child_raises_and_keeps_it(tree):
    sup = tree.sup(ONE, [tree.w("a")])
    before = tree.kids(sup)
    with pytest.raises(AlreadyStarted):
        tree.c.delete_child(sup, "a")
    assert tree.kids(sup)["a"].pid == before["a"].pid


def test_delete_child_forgets_a_terminated_child(tree):
    sup = tree.sup(ONE, [tree.w("a"), tree.w("b")])
    tree.c.terminate_child(sup, "b")
    assert tree.c.delete_child(sup, "b") is True
    assert list(tree.kids(sup)) == ["a"]
    with pytest.raises(NoProc):
        tree.c.restart_child(sup, "b")


def test_unknown_child_id_raises_and_leaves_the_tree_unchanged(tree):
    sup = tree.sup(ONE, [tree.w("a")])
    for op in (tree.c.terminate_child, tree.c.restart_child, tree.c.delete_child):
        with pytest.raises(NoProc):
            op(sup, "nope")
    assert list(tree.kids(sup)) == ["a"]


def test_simple_one_for_one_terminates_children_by_address(tree):
    sup = tree.sup({**ONE, "strategy": "simple_one_for_one"}, [tree.w("tmpl")])
    a1 = tree.c.start_child(sup, {"id": "d1"})
    a2 = tree.c.start_child(sup, {"id": "d2"})
    assert tree.c.count_children(sup) == {"specs": 1, "active": 2, "supervisors": 0, "workers": 2}
    assert tree.c.terminate_child(sup, a1) is True
    assert [r.addr for r in tree.c.which_children(sup)] == [a2]
    with pytest.raises(SupervisionError):
        tree.c.restart_child(sup, a2)
    with pytest.raises(SupervisionError):
        tree.c.delete_child(sup, a2)


# ----------------------------------------------------------------- shutdown
def test_worker_slower_than_its_shutdown_is_killed(tree):
    sup = tree.sup(ONE, [tree.w("s", slow_stop=30, shutdown=0.3)])
    s = tree.kids(sup)["s"]
    t = time.monotonic()
    tree.c.terminate_child(sup, "s")
    assert 0.3 <= time.monotonic() - t < 5
    assert not alive(s.pid) and tree.lines()[-1] == "start s"


def test_a_stopped_child_is_killed_after_its_shutdown_and_its_siblings_go_on(tree):
    """A child frozen by SIGSTOP (a debugger, a swapped-out process) reads no
    message: its supervisor waits its shutdown, then kills it, and meanwhile
    answers calls and restarts others."""
    sup = tree.sup(ONE, [tree.w("s", shutdown=0.5), tree.w("b")])
    kids = tree.kids(sup)
    os.kill(kids["s"].pid, signal.SIGSTOP)
    try:
        t = time.monotonic()
        assert tree.c.count_children(sup)["active"] == 2
        tree.c.terminate_child(sup, "s")
        assert 0.5 <= time.monotonic() - t < 5
        wait_until(lambda: not alive(kids["s"].pid), 5, "the stopped child killed")
        tree.c.restart_child(sup, "s")
        assert alive(tree.kids(sup)["s"].pid) and alive(kids["b"].pid)
    finally:
        try:
            os.kill(kids["s"].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_brutal_kill_kills_without_running_terminate(tree):
    sup = tree.sup(ONE, [tree.w("s", slow_stop=30, shutdown="brutal_kill")])
    s = tree.kids(sup)["s"]
    t = time.monotonic()
    tree.c.terminate_child(sup, "s")
    assert time.monotonic() - t < 2
    assert not alive(s.pid) and tree.lines()[-1] == "start s"


def test_a_supervisor_ends_although_thespian_lost_its_children_exits(tree):
    """Thespian loses the exit notices of children that die while it handles
    another child's (KillingSup forces it). The supervisor restarts them and
    later stops in order; its process must then end at once, not wait in
    Thespian for notices of long-dead children (it waited forever)."""
    spec = ChildSpec(
        f"racy-{os.getpid()}",
        KillingSup,
        {
            "id": "racy",
            "log": str(tree.log),
            "flags": ONE,
            "specs": [tree.w(f"k{i}", shutdown="brutal_kill") for i in range(4)],
        },
        restart="temporary",
        type="supervisor",
    )
    sup = tree.c.start_child(tree.root, spec)
    pid, kids = tree.c.get_pid(sup), tree.kids(sup)
    os.kill(kids["k0"].pid, signal.SIGKILL)
    wait_until(
        lambda: all(alive(r.pid) and r.pid != kids[i].pid for i, r in tree.kids(sup).items()),
        5,
        "every child restarted",
    )
    tree.c.terminate_child(tree.root, spec.id)
    wait_until(lambda: not alive(pid), 3, "the supervisor's process to end")


def test_a_child_whose_exit_notice_is_lost_is_restarted_all_the_same(tree):
    """Thespian can lose a child's exit notice with no other exit to reveal
    it (DeafSup loses them all): the kernel's word (a pidfd) is enough for
    the supervisor to restart the child, more than once."""
    spec = ChildSpec(
        f"deaf-{os.getpid()}",
        DeafSup,
        {"id": "deaf", "log": str(tree.log), "flags": ONE, "specs": [tree.w("d")]},
        restart="temporary",
        type="supervisor",
    )
    sup = tree.c.start_child(tree.root, spec)
    for _ in range(2):
        old = tree.kids(sup)["d"].pid
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: (new := tree.kids(sup)["d"].pid) != old and alive(new), 5, "d restarted")
    tree.c.terminate_child(tree.root, spec.id)


def test_worker_within_its_shutdown_runs_terminate(tree):
    sup = tree.sup(ONE, [tree.w("s", slow_stop=0.1, shutdown=5)])
    tree.c.terminate_child(sup, "s")
    assert tree.lines()[-1] == "stop s"


# ---------------------------------------------------------------- bad input
BAD_SPECS = {
    "unknown_field": {"id": "x", "start": Worker, "bogus": 1},
    "bad_restart": {"id": "x", "start": Worker, "restart": "sometimes"},
    "negative_shutdown": {"id": "x", "start": Worker, "shutdown": -1},
    "non_class_start": {"id": "x", "start": "os:getcwd"},
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_malformed_child_spec_raises_bad_child_spec(case):
    data = BAD_SPECS[case]
    with pytest.raises(BadChildSpec):
        spec = ChildSpec.from_dict(data)
        spec.actor_class()


@pytest.mark.parametrize("value", [{"strategy": "bogus"}, {"intensity": -1}, {"period": 0}])
def test_bad_supervisor_flags_raise_bad_child_spec(value):
    with pytest.raises(BadChildSpec):
        SupFlags.from_value(value)


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_start_child_with_malformed_spec_raises_bad_child_spec_at_the_call_site(tree, case):
    sup = tree.sup(ONE, [tree.w("a")])
    with pytest.raises(BadChildSpec):
        tree.c.start_child(sup, BAD_SPECS[case], timeout=0.7)


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_start_child_with_malformed_spec_leaves_the_tree_unchanged(tree, case):
    sup = tree.sup(ONE, [tree.w("a")])
    before = tree.kids(sup)
    with pytest.raises(SupervisionError):
        tree.c.start_child(sup, BAD_SPECS[case], timeout=0.7)
    after = tree.kids(sup)
    assert list(after) == ["a"] and after["a"].pid == before["a"].pid


@pytest.mark.parametrize("value", [{"strategy": "bogus"}, {"intensity": -1}])
def test_start_child_of_supervisor_with_bad_flags_raises_start_error_naming_the_field(tree, value):
    sup = tree.sup(ONE, [])
    with pytest.raises(StartError) as info:
        tree.c.start_child(sup, tree.sup_spec("n", {**ONE, **value}, []), timeout=1.5)
    assert "BadChildSpec" in repr(info.value.reason)
    assert tree.c.which_children(sup) == []
