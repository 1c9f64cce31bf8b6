"""``[couch_jobs]`` through ``_config`` at run time, on a real node over HTTP.

One node for the module (the queue tree and the HTTP listener, real
processes, a real SQLite file); each test starts from the fixtures' small
``[couch_jobs]`` values and puts them back afterwards. What a change does
is checked where it matters: notifications batch by the new holdoff, a new
type is picked up by the new check period, every per-type actor reports the
new values, a SIGKILLed actor comes back with them, and a bad value changes
nothing (store, config, actors).
"""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
import requests

from actors import jobs
from actors.config import GetCouchJobsInUse
from actors.http_server import HTTP_SERVER_NAME, GetHttpInfo
from actors.jobs_server import GetNotifierServer
from actors.names import ACTIVITY_MONITOR_SUP, JOBS_SERVER, NOTIFIER_SUP
from supervision import ChildSpec

from tests.procs import proc_stat

from .jobs_fixtures import FAST_COUCH_JOBS, QueueNode, SubscriberActor, dump, wait_until

pytestmark = pytest.mark.timeout(180)

CONFIG = "/_node/_local/_config/couch_jobs"
T = "cfg-type"


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    node = QueueNode(f"sqlite:///{tmp_path_factory.mktemp('httpcfg')}/store.db")
    try:
        node.url = f"http://127.0.0.1:{node.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)['port']}"
        jobs.set_type_timeout(node.db, T, 30)
        node.wait_tree_up()
        yield node
    finally:
        node.stop()


@pytest.fixture(autouse=True)
def fast_values(q):
    """Each test starts and ends with the fixtures' values."""
    reset(q)
    yield
    reset(q)


def reset(q) -> None:
    for key, value in FAST_COUCH_JOBS.items():
        r = put(q, key, str(value))
        assert r.status_code == 200, r.text


def put(q, key: str, value, raw: bytes | None = None) -> requests.Response:
    data = raw if raw is not None else json.dumps(value)
    return requests.put(f"{q.url}{CONFIG}/{key}", data=data, headers={"Content-Type": "application/json"},
                        timeout=60)


def get(q, path: str = "") -> requests.Response:
    return requests.get(f"{q.url}{CONFIG}{path}", timeout=30)


def in_use(q) -> dict:
    """What the jobs server and every activity monitor and notifier (its type monitor) run with."""
    out = {"server": q.client.call(JOBS_SERVER, GetCouchJobsInUse(), 10.0)}
    for sup in (ACTIVITY_MONITOR_SUP, NOTIFIER_SUP):
        for kid in q.kids(sup):
            out[(sup, q.pid(kid.addr))] = q.client.call(kid.addr, GetCouchJobsInUse(), 10.0)
    return out


def values_in_use(q) -> dict:
    """The union of the [couch_jobs] values the queue's actors report (each key once)."""
    merged: dict = {}
    for values in in_use(q).values():
        for key, value in values.items():
            assert merged.setdefault(key, value) == value, f"two actors disagree on {key}"
    return merged


def start_subscriber(q, name: str):
    spec = ChildSpec(name, SubscriberActor, {"store": q.store_url}, restart="temporary")
    return q.client.start_child(q.client.node, spec)


def child_pids(pid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and (proc_stat(int(p)) or ("", 0))[1] == pid]


# ------------------------------------------------------------------ reading


def test_get_shows_the_running_values(q) -> None:
    section = get(q).json()
    assert section == {key: str(value) for key, value in FAST_COUCH_JOBS.items()}
    assert get(q, "/type_monitor_holdoff_msec").json() == "50"
    assert get(q, "/bogus").status_code == 404
    assert values_in_use(q) == FAST_COUCH_JOBS


def test_put_answers_the_old_value_and_every_actor_runs_with_the_new_one(q) -> None:
    r = put(q, "activity_monitor_max_jitter_msec", "7")
    assert r.status_code == 200 and r.json() == "50"  # CouchDB answers the old value
    assert get(q, "/activity_monitor_max_jitter_msec").json() == "7"
    # the answer comes once the running actors applied it: no waiting here
    assert values_in_use(q)["activity_monitor_max_jitter_msec"] == 7
    assert put(q, "type_monitor_timeout_msec", "2500").json() == "infinity"
    assert values_in_use(q)["type_monitor_timeout_msec"] == 2500
    assert put(q, "type_monitor_timeout_msec", " infinity ").json() == "2500"
    assert values_in_use(q)["type_monitor_timeout_msec"] == "infinity"
    assert put(q, "activity_monitor_max_jitter_msec", "7").json() == "7"  # same value again: fine


# ------------------------------------------------------------ behaviour


def test_holdoff_change_batches_notifications_differently(q) -> None:
    """holdoff 0: one event per update; 60 s: updates coalesce, none goes out
    meanwhile; back to 50 ms: the waiting notification goes out at once."""
    actor = start_subscriber(q, "cfg-sub-holdoff")
    try:
        jobs.add(q.db, T, "h1", {"n": 0})
        assert q.client.call(actor, ("subscribe", T, "h1"), 10)[1] == "pending"
        job, _ = jobs.accept(q.db, T, timeout=10)
        wait_until(lambda: any(e[1] == "running" for e in q.client.call(actor, "events")), 15, "running")

        assert put(q, "type_monitor_holdoff_msec", "0").json() == "50"
        for n in range(1, 9):
            job = jobs.update(q.db, job, {"n": n})
            time.sleep(0.15)  # spacing the updates is the point of the test, not a synchronisation
        wait_until(lambda: ("h1", "running", {"n": 8}) in q.client.call(actor, "events"), 15, "the last update")
        fast = [e for e in q.client.call(actor, "events") if e[1] == "running" and e[2]["n"] >= 1]
        assert len(fast) >= 4, fast  # about one event per update

        assert put(q, "type_monitor_holdoff_msec", "60000").json() == "0"
        before = len(q.client.call(actor, "events"))
        for n in range(9, 17):
            job = jobs.update(q.db, job, {"n": n})
            time.sleep(0.15)
        held = q.client.call(actor, "events")[before:]
        assert len(held) <= 1, held  # coalesced: at most one went out before the holdoff started

        assert put(q, "type_monitor_holdoff_msec", "50").json() == "60000"  # the pending one is re-timed
        wait_until(lambda: ("h1", "running", {"n": 16}) in q.client.call(actor, "events"), 10,
                   "the coalesced notification, long before 60 s")
        jobs.finish(q.db, job)
    finally:
        q.client.terminate_child(q.client.node, "cfg-sub-holdoff")


def test_type_check_period_change_picks_up_a_new_type_sooner(q) -> None:
    monitors = lambda: len(q.kids(ACTIVITY_MONITOR_SUP))  # noqa: E731
    start = monitors()
    assert put(q, "type_check_max_jitter_msec", "0").status_code == 200
    assert put(q, "type_check_period_msec", "600000").json() == "500"
    jobs.set_type_timeout(q.db, "cfg-late-type", 30)
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # 4 of the old periods: the new one (10 min) holds it back
            assert monitors() == start, "a type check ran although the period is 10 minutes"
            time.sleep(0.1)
        assert put(q, "type_check_period_msec", "200").json() == "600000"  # re-armed from now
        wait_until(lambda: monitors() == start + 1, 10, "the new type's activity monitor")
        assert values_in_use(q)["type_check_period_msec"] == 200
    finally:
        jobs.clear_type_timeout(q.db, "cfg-late-type")
        q.force_check_types()


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("key, value, raw", [
    ("type_check_period_msec", "0", None),          # must be >= 1
    ("type_monitor_timeout_msec", "0", None),
    ("type_monitor_holdoff_msec", "-1", None),
    ("type_monitor_holdoff_msec", "abc", None),
    ("type_monitor_holdoff_msec", "1.5", None),
    ("type_monitor_holdoff_msec", "", None),
    ("type_monitor_holdoff_msec", "\u0661\u0662", None),   # Arabic-Indic digits are not ASCII digits
    ("activity_monitor_max_jitter_msec", "4294967296", None),  # over Erlang's timer limit
    ("type_check_max_jitter_msec", "9" * 5000, None),
    ("type_monitor_timeout_msec", "infinityx", None),
    ("type_check_period_msec", "1 000", None),
    ("bogus_key", "1", None),
    ("type_monitor_holdoff_msec", 5, None),          # not a JSON string
    ("type_monitor_holdoff_msec", None, b"{not json"),
    ("type_monitor_holdoff_msec", None, b'["10"]'),
])
def test_bad_values_are_rejected_and_nothing_changes(q, key, value, raw) -> None:
    before = (dump(q.db), get(q).json(), values_in_use(q), q.tree_pids())
    r = put(q, key, value, raw)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request" and r.json()["reason"]
    assert (dump(q.db), get(q).json(), values_in_use(q), q.tree_pids()) == before


def test_other_sections_stay_read_only(q) -> None:
    r = requests.put(f"{q.url}/_node/_local/_config/node/port", json="1", timeout=30)
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    r = requests.delete(f"{q.url}{CONFIG}/type_monitor_holdoff_msec", timeout=30)
    assert r.status_code == 405 and r.headers["Allow"] == "GET,PUT"  # as [replicator]: no DELETE


# ----------------------------------------------------------------- restarts


def test_sigkilled_actors_come_back_with_the_new_values(q) -> None:
    changed = {"type_monitor_holdoff_msec": 123, "type_monitor_timeout_msec": 4567,
               "activity_monitor_max_jitter_msec": 77, "type_check_period_msec": 700,
               "type_check_max_jitter_msec": 11}
    for key, value in changed.items():
        assert put(q, key, str(value)).status_code == 200
    assert values_in_use(q) == changed

    # the type monitor: its notifier exits with it, the jobs server exits
    # (dead_notifier_restarts_jobs_server) and starts fresh per-type actors
    notifier = q.client.call(JOBS_SERVER, GetNotifierServer(T), 10)
    type_monitor_pid = child_pids(q.pid(notifier))[0]
    server_pid = q.tree_pids()["server"]
    os.kill(type_monitor_pid, signal.SIGKILL)
    wait_until(lambda: q.tree_pids()["server"] not in (None, server_pid), 20, "a new jobs server")
    q.wait_tree_up()
    assert values_in_use(q) == changed

    # the jobs server itself
    server_pid = q.tree_pids()["server"]
    os.kill(server_pid, signal.SIGKILL)
    wait_until(lambda: q.tree_pids()["server"] not in (None, server_pid), 20, "a new jobs server")
    q.wait_tree_up()
    assert values_in_use(q) == changed

    # the HTTP process: the values live in the node, not in it
    http_pid = q.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)["pid"]
    os.kill(http_pid, signal.SIGKILL)
    wait_until(lambda: q.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)["pid"] != http_pid, 20,
               "a new HTTP process")
    q.url = f"http://127.0.0.1:{q.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)['port']}"
    wait_until(lambda: get(q).json() == {k: str(v) for k, v in changed.items()}, 20, "the changed values over HTTP")

    # a restart of the whole queue tree (as of the node) starts again from the node's config
    q.restart_app()
    q.wait_tree_up()
    assert values_in_use(q) == FAST_COUCH_JOBS
    assert get(q).json() == {key: str(value) for key, value in FAST_COUCH_JOBS.items()}
