"""Supervisor strategies and restart types, start/stop order, intensity, ignore, start errors."""

from __future__ import annotations

import pytest

from supervision import CallFailed, StartError, SupervisionError
from tests.supervision.conftest import alive, wait_until
from tests.supervision.fixtures import Probe

STRATEGIES = ["one_for_one", "one_for_all", "rest_for_one"]
#: Which of a, b, c get new processes when b exits and is restarted.
RESTARTED = {"one_for_one": {"b"}, "one_for_all": {"a", "b", "c"}, "rest_for_one": {"b", "c"}}
#: Event-log lines after b's own "stop b", per strategy.
RESTART_LINES = {
    "one_for_one": ["start b"],
    "one_for_all": ["stop c", "stop a", "start a", "start b", "start c"],
    "rest_for_one": ["stop c", "start b", "start c"],
}


def flags(strategy: str, intensity: int = 10, period: float = 10) -> dict:
    return {"strategy": strategy, "intensity": intensity, "period": period}


def abc(tree, strategy: str, b_restart: str):
    sup = tree.sup(flags(strategy), [tree.w("a"), tree.w("b", restart=b_restart), tree.w("c")])
    before = tree.kids(sup)
    assert tree.lines() == ["start top", "start a", "start b", "start c"]
    return sup, before


def end_b(tree, before, how: str) -> None:
    addr = before["b"].addr
    if how == "crash":
        with pytest.raises(CallFailed):
            tree.c.call(addr, "crash")
    else:
        assert tree.c.call(addr, ("stop", "normal")) == "stopping"


def wait_restarted(tree, sup, before, ids: set) -> dict:
    def done():
        now = tree.kids(sup)
        ok = all(now[i].addr is not None and now[i].pid != before[i].pid for i in ids)
        return now if ok else None

    now = wait_until(done, 5, f"restart of {sorted(ids)}")
    for i in {"a", "b", "c"} - ids:
        assert now[i].pid == before[i].pid, f"{i} should not have been restarted"
    for i in ids:
        assert alive(now[i].pid)
    wait_until(lambda: not any(alive(before[i].pid) for i in ids), 5, "the old processes to exit")
    return now


# ------------------------------------------------ restart types x strategies
@pytest.mark.parametrize("restart", ["permanent", "transient"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_abnormal_exit_restarts_per_strategy(tree, strategy, restart):
    sup, before = abc(tree, strategy, restart)
    end_b(tree, before, "crash")
    wait_restarted(tree, sup, before, RESTARTED[strategy])
    assert tree.lines()[4:] == ["stop b"] + RESTART_LINES[strategy]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_permanent_child_is_restarted_after_normal_exit(tree, strategy):
    sup, before = abc(tree, strategy, "permanent")
    end_b(tree, before, "normal")
    wait_restarted(tree, sup, before, RESTARTED[strategy])
    assert tree.lines()[4:] == ["stop b"] + RESTART_LINES[strategy]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_transient_child_is_not_restarted_after_normal_exit(tree, strategy):
    sup, before = abc(tree, strategy, "transient")
    end_b(tree, before, "normal")
    now = wait_until(lambda: (k := tree.kids(sup))["b"].addr is None and k, 5, "b to be gone")
    assert list(now) == ["a", "b", "c"], "a transient child's spec is kept"
    assert now["a"].pid == before["a"].pid and now["c"].pid == before["c"].pid
    assert tree.c.count_children(sup) == {"specs": 3, "active": 2, "supervisors": 0, "workers": 3}
    assert tree.lines()[4:] == ["stop b"]


@pytest.mark.parametrize("how", ["crash", "normal"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_temporary_child_is_never_restarted_and_is_removed(tree, strategy, how):
    sup, before = abc(tree, strategy, "temporary")
    end_b(tree, before, how)
    now = wait_until(lambda: (k := tree.kids(sup)) and "b" not in k and k, 5, "b to be removed")
    assert list(now) == ["a", "c"]
    assert now["a"].pid == before["a"].pid and now["c"].pid == before["c"].pid
    assert tree.lines()[4:] == ["stop b"]


# ------------------------------------------------------ simple_one_for_one
def sofo(tree, restart: str):
    sup = tree.sup(flags("simple_one_for_one"), [tree.w("tmpl", restart=restart)])
    addrs = [tree.c.start_child(sup, {"id": f"d{i}", "log": str(tree.log)}) for i in range(3)]
    rows = tree.c.which_children(sup)
    assert [r.addr for r in rows] == addrs and all(r.id is None for r in rows)
    return sup, rows


def end_middle(tree, rows, how: str) -> None:
    if how == "crash":
        with pytest.raises(CallFailed):
            tree.c.call(rows[1].addr, "crash")
    else:
        tree.c.call(rows[1].addr, ("stop", "normal"))


@pytest.mark.parametrize("how,restart", [("crash", "permanent"), ("normal", "permanent"), ("crash", "transient")])
def test_simple_one_for_one_restarts_only_the_exited_child(tree, how, restart):
    sup, rows = sofo(tree, restart)
    end_middle(tree, rows, how)
    now = wait_until(
        lambda: (r := tree.c.which_children(sup)) and r[1].pid != rows[1].pid and r[1].addr is not None and r,
        5,
        "restart",
    )
    assert len(now) == 3
    assert [now[0].pid, now[2].pid] == [rows[0].pid, rows[2].pid]
    assert tree.lines()[-2:] == ["stop d1", "start d1"]


@pytest.mark.parametrize("how,restart", [("normal", "transient"), ("crash", "temporary"), ("normal", "temporary")])
def test_simple_one_for_one_drops_a_child_that_is_not_restarted(tree, how, restart):
    sup, rows = sofo(tree, restart)
    end_middle(tree, rows, how)
    now = wait_until(lambda: (r := tree.c.which_children(sup)) and len(r) == 2 and r, 5, "removal")
    assert [r.pid for r in now] == [rows[0].pid, rows[2].pid]
    assert tree.c.count_children(sup) == {"specs": 1, "active": 2, "supervisors": 0, "workers": 2}


# ------------------------------------------------------------ start order
def test_children_start_in_order_and_stop_in_reverse_order(tree):
    inner = tree.sup_spec("n", flags("one_for_one"), [tree.w("n1"), tree.w("n2")])
    tree.sup(flags("one_for_one"), [tree.w("a"), inner, tree.w("c")])
    assert tree.lines() == ["start top", "start a", "start n", "start n1", "start n2", "start c"]
    tree.cleanup()
    wait_until(lambda: len(tree.lines()) == 12, 5, "the whole tree to stop")
    assert tree.lines()[6:] == ["stop c", "stop n2", "stop n1", "stop n", "stop a", "stop top"]


# --------------------------------------------------------------- intensity
def nested(tree, restart: str):
    inner = tree.sup_spec("n", flags("one_for_one", intensity=1, period=30), [tree.w("w")], restart=restart)
    top = tree.sup(flags("one_for_one", intensity=5), [tree.w("p", cls=Probe), inner, tree.w("x")])
    kids = tree.kids(top)
    ref = tree.c.call(kids["p"].addr, ("monitor_sync", kids["n"].addr))
    w = tree.kids(kids["n"].addr)["w"]
    with pytest.raises(CallFailed):
        tree.c.call(w.addr, "crash")  # restart 1: within intensity
    w2 = wait_until(lambda: (k := tree.kids(kids["n"].addr)["w"]).pid != w.pid and k.addr and k, 5, "w restart")
    with pytest.raises(CallFailed):
        tree.c.call(w2.addr, "crash")  # restart 2: over intensity, n gives up
    downs = wait_until(lambda: tree.c.call(kids["p"].addr, "events"), 5, "Down of the nested supervisor")
    assert [(d.ref, d.reason) for d in downs] == [(ref, "shutdown")]
    return top, kids


def test_nested_supervisor_over_intensity_exits_shutdown_and_parent_restarts_it(tree):
    top, before = nested(tree, "permanent")
    now = wait_until(
        lambda: (k := tree.kids(top))["n"].addr is not None and k["n"].pid != before["n"].pid and k, 5, "restart of n"
    )
    assert now["x"].pid == before["x"].pid and now["p"].pid == before["p"].pid
    fresh = tree.kids(now["n"].addr)["w"]
    assert alive(fresh.pid)
    tail = tree.lines()[5:]
    assert tail == ["stop w", "start w", "stop w", "stop n", "start n", "start w"], tail


def test_transient_nested_supervisor_over_intensity_is_not_restarted(tree):
    top, before = nested(tree, "transient")
    now = wait_until(lambda: (k := tree.kids(top))["n"].addr is None and k, 5, "n to be gone")
    assert list(now) == ["p", "n", "x"]
    assert now["x"].pid == before["x"].pid
    wait_until(lambda: not alive(before["n"].pid), 5, "n's process to exit")


def test_top_supervisor_over_intensity_stops_its_children_in_reverse_order(tree):
    top = tree.sup(flags("one_for_one", intensity=0), [tree.w("a"), tree.w("b")])
    kids = tree.kids(top)
    with pytest.raises(CallFailed):
        tree.c.call(kids["a"].addr, "crash")
    wait_until(lambda: not alive(kids["b"].pid), 5, "b to stop")
    assert tree.lines()[3:] == ["stop a", "stop b", "stop top"]
    assert not any(r.id.startswith("top-") for r in tree.c.which_children(tree.root))


# ------------------------------------------------------------------ ignore
def test_child_whose_init_returns_ignore_is_kept_as_a_spec_without_process(tree):
    sup = tree.sup(flags("one_for_one"), [tree.w("a"), tree.w("i", ignore=True), tree.w("b")])
    kids = tree.kids(sup)
    assert list(kids) == ["a", "i", "b"]
    assert kids["i"].addr is None and kids["i"].pid is None
    assert tree.c.count_children(sup) == {"specs": 3, "active": 2, "supervisors": 0, "workers": 3}
    assert tree.lines() == ["start top", "start a", "ignore i", "start b"]


def test_start_child_returning_ignore_returns_none_and_keeps_the_spec(tree):
    sup = tree.sup(flags("one_for_one"), [])
    assert tree.c.start_child(sup, tree.w("i", ignore=True)) is None
    assert [(r.id, r.addr) for r in tree.c.which_children(sup)] == [("i", None)]


def test_simple_one_for_one_start_child_returning_ignore_keeps_nothing(tree):
    sup = tree.sup(flags("simple_one_for_one"), [tree.w("tmpl")])
    assert tree.c.start_child(sup, {"id": "i", "ignore": True}) is None
    assert tree.c.which_children(sup) == []


# -------------------------------------------------------------- init errors
def test_start_child_raises_start_error_when_init_raises(tree):
    sup = tree.sup(flags("one_for_one"), [tree.w("a")])
    before = tree.kids(sup)
    with pytest.raises(StartError) as info:
        tree.c.start_child(sup, tree.w("f", fail_init=True), timeout=1.5)
    assert info.value.child_id == "f"
    assert list(tree.kids(sup)) == list(before)


def test_failed_start_child_leaves_the_tree_unchanged(tree):
    sup = tree.sup(flags("one_for_one"), [tree.w("a")])
    before = tree.kids(sup)
    with pytest.raises(SupervisionError):
        tree.c.start_child(sup, tree.w("f", fail_init=True), timeout=1.5)
    after = tree.kids(sup)
    assert list(after) == ["a"] and after["a"].pid == before["a"].pid
    assert tree.lines() == ["start top", "start a"]


def test_supervisor_whose_static_child_fails_to_start_fails_its_own_start(tree):
    sup = tree.sup(flags("one_for_one"), [])
    bad = tree.sup_spec("n", flags("one_for_one"), [tree.w("n1"), tree.w("f", fail_init=True), tree.w("n3")])
    with pytest.raises(SupervisionError):
        tree.c.start_child(sup, bad, timeout=1.5)
    assert tree.c.which_children(sup) == []
    assert tree.lines() == ["start top", "start n", "start n1", "stop n1"]


def test_start_child_raises_start_error_when_a_nested_supervisor_fails_to_start(tree):
    sup = tree.sup(flags("one_for_one"), [])
    bad = tree.sup_spec("n", flags("one_for_one"), [tree.w("f", fail_init=True)])
    with pytest.raises(StartError):
        tree.c.start_child(sup, bad, timeout=1.5)
