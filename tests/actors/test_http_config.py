"""``_config`` at run time, on real nodes over HTTP.

``[couch_jobs]``: one node for the module (the queue tree and the HTTP
listener, real processes, a real SQLite file); each test starts from the
fixtures' small ``[couch_jobs]`` values and puts them back afterwards. What
a change does is checked where it matters: notifications batch by the new
holdoff, a new type is picked up by the new check period, every per-type
actor reports the new values, and a SIGKILLed actor (or the settings
keeper) comes back with them.

``[replicator]`` and the config file: nodes started from a file as
``otpjobs node start --config FILE`` starts them. A change survives a
SIGKILLed scheduler (which obeys it) and HTTP process; it is written into
the file (only its line) unless ``X-Couch-Persist: false``, and so
survives a node restart; a bad value of either section (the example
table; tests/hostile/test_http.py puts random ones), or a file that cannot
be rewritten, changes nothing in the store, the file or the actors.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

import pytest
import requests

import fdblayer
from actors import jobs
from actors.settings.config import CONFIG_SERVER, ConfigWriteError, GetCouchJobsInUse, load, write_value
from actors.http.server import HTTP_SERVER_NAME, GetHttpInfo
from actors.queue.protocol import GetNotifierServer
from actors.names import ACTIVITY_MONITOR_SUP, JOBS_SERVER, NOTIFIER_SUP
from actors.node.root import ROOT_FLAGS, root_children
from actors.scheduler.client import SchedulerClient
from actors.scheduler.sup import SCHEDULER_NAME
from supervision import ChildSpec, start_node

from tests.procs import proc_stat

from .jobs_fixtures import FAST_COUCH_JOBS, QueueNode, SubscriberActor, dump, free_port, group_pids, wait_until

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
def fast_values(request):
    """Each test of the queue node starts and ends with the fixtures' values."""
    if "q" not in request.fixturenames:
        yield
        return
    q = request.getfixturevalue("q")
    reset(q)
    yield
    reset(q)


def reset(q) -> None:
    for key, value in FAST_COUCH_JOBS.items():
        r = put(q, key, str(value))
        assert r.status_code == 200, r.text


def put(q, key: str, value, raw: bytes | None = None) -> requests.Response:
    data = raw if raw is not None else json.dumps(value)
    return requests.put(f"{q.url}{CONFIG}/{key}", data=data, headers={"Content-Type": "application/json"}, timeout=60)


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


@pytest.mark.slow
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
        wait_until(
            lambda: ("h1", "running", {"n": 16}) in q.client.call(actor, "events"),
            10,
            "the coalesced notification, long before 60 s",
        )
        jobs.finish(q.db, job)
    finally:
        q.client.terminate_child(q.client.node, "cfg-sub-holdoff")


@pytest.mark.slow
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


def test_other_sections_stay_read_only(q) -> None:
    r = requests.put(f"{q.url}/_node/_local/_config/node/port", json="1", timeout=30)
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    r = requests.delete(f"{q.url}{CONFIG}/type_monitor_holdoff_msec", timeout=30)
    assert r.status_code == 405 and r.headers["Allow"] == "GET,PUT"  # as [replicator]: no DELETE


# ----------------------------------------------------------------- restarts


@pytest.mark.slow
def test_sigkilled_actors_come_back_with_the_new_values(q) -> None:
    changed = {
        "type_monitor_holdoff_msec": 123,
        "type_monitor_timeout_msec": 4567,
        "activity_monitor_max_jitter_msec": 77,
        "type_check_period_msec": 700,
        "type_check_max_jitter_msec": 11,
    }
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
    wait_until(
        lambda: q.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)["pid"] != http_pid, 20, "a new HTTP process"
    )
    q.url = f"http://127.0.0.1:{q.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)['port']}"
    wait_until(lambda: get(q).json() == {k: str(v) for k, v in changed.items()}, 20, "the changed values over HTTP")

    # a restart of the whole queue tree: the values live in the node's keeper, outside it
    q.restart_app()
    q.wait_tree_up()
    assert values_in_use(q) == changed

    # the keeper itself: the new one starts again from the node's config (this node has
    # no config file) and hands its values to the running queue, which keeps running
    keeper_pid, pids = q.pid(CONFIG_SERVER), q.tree_pids()
    os.kill(keeper_pid, signal.SIGKILL)
    wait_until(lambda: values_in_use(q) == FAST_COUCH_JOBS, 20, "the new keeper's values in use")
    assert q.pid(CONFIG_SERVER) != keeper_pid and q.tree_pids() == pids
    assert get(q).json() == {key: str(value) for key, value in FAST_COUCH_JOBS.items()}
    assert put(q, "type_monitor_holdoff_msec", "77").json() == "50"  # and it reaches them again
    assert values_in_use(q)["type_monitor_holdoff_msec"] == 77


# ============================================== [replicator], and the config file


FILE_TEXT = """\
# A node's config file: comments, blank lines, other sections and the order of keys stay.
[node]
store = {store}
log_level = warning

; the scheduler's slots
[replicator]
max_jobs = 3
interval = 60000

[couch_jobs]
# small values, so the tests never wait for the seed's defaults
type_check_period_msec = 500
type_check_max_jitter_msec = 100
activity_monitor_max_jitter_msec = 50

[httpd]
; a section this node does not read
socket_options = [{{nodelay, true}}]
"""
IDLE = "tests.actors.scheduler_fixtures:idle"


class FileNode:
    """A node started from a config file as ``otpjobs node start --config FILE``
    starts one (:func:`actors.node.root.root_children`), in this process."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "node.ini"
        self.store = f"sqlite:///{directory / 'store.db'}"
        self.path.write_text(FILE_TEXT.format(store=self.store))
        self.port = free_port()
        self.db = fdblayer.open(self.store)
        self.start()

    def start(self) -> None:
        config = load(self.path, {("node", "port"): self.port, ("node", "http_port"): 0})
        self.node = start_node(self.port, ROOT_FLAGS, root_children(config), level=logging.WARNING)
        self.client = self.node.client()
        self.s = SchedulerClient(self.client)
        self.url = f"http://127.0.0.1:{self.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)['port']}"

    def stop(self) -> None:
        pgid = self.node.pgid
        self.node.stop()
        wait_until(lambda: not group_pids(pgid), 15, "no process of the node left")

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.db.close()

    def put(self, section: str, key: str, value, persist: bool = True, raw: bytes | None = None):
        headers = {"Content-Type": "application/json"}
        if not persist:
            headers["X-Couch-Persist"] = "false"
        data = raw if raw is not None else json.dumps(value)
        return requests.put(f"{self.url}/_node/_local/_config/{section}/{key}", data=data, headers=headers, timeout=60)

    def get(self, section: str) -> dict:
        r = requests.get(f"{self.url}/_node/_local/_config/{section}", timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    def pid(self, name: str) -> int:
        return self.client.get_pid(name)

    def running(self) -> tuple[int, int]:
        stats = self.s.stats()
        return stats["running"], stats["pending"]

    def add(self, job_id: str) -> None:
        self.s.add_job({"id": job_id, "handler": IDLE, "continuous": True})


@pytest.fixture
def fnode(tmp_path):
    node = FileNode(tmp_path)
    try:
        yield node
    finally:
        node.close()


@pytest.mark.slow
def test_replicator_values_survive_a_sigkilled_scheduler_and_http_process(fnode) -> None:
    for i in range(2):
        fnode.add(f"j{i}")
    wait_until(lambda: fnode.running() == (2, 0), 20, "2 jobs running (max_jobs = 3 in the file)")
    file_before = fnode.path.read_text()

    # not persisted: the values live in the node's keeper, which the scheduler reads when it starts
    r = fnode.put("replicator", "max_jobs", "1", persist=False)
    assert r.status_code == 200 and r.json() == "3"  # CouchDB answers the old value
    assert fnode.put("replicator", "interval", "300", persist=False).json() == "60000"
    wait_until(lambda: fnode.running() == (1, 1), 20, "the next reschedule trimmed to max_jobs = 1")

    scheduler = fnode.pid(SCHEDULER_NAME)
    os.kill(scheduler, signal.SIGKILL)
    wait_until(lambda: fnode.pid(SCHEDULER_NAME) != scheduler, 20, "a new scheduler")
    assert fnode.get("replicator")["max_jobs"] == "1"
    settings = fnode.s.settings()
    assert (settings["max_jobs"], settings["interval"]) == (1, 300)
    # the new scheduler adopted the running job (the waiting one, transient, died with the old
    # table) and obeys max_jobs = 1, not the file's 3: a new job waits instead of starting
    wait_until(lambda: fnode.running() == (1, 0), 20, "the running job adopted")
    fnode.add("after-restart")
    assert fnode.running() == (1, 1)
    fnode.s.reschedule()
    assert fnode.running() == (1, 1)

    http_pid = fnode.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)["pid"]
    os.kill(http_pid, signal.SIGKILL)
    wait_until(
        lambda: fnode.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)["pid"] != http_pid, 20, "a new HTTP process"
    )
    fnode.url = f"http://127.0.0.1:{fnode.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 10.0)['port']}"
    section = wait_until(lambda: fnode.get("replicator"), 20, "the new HTTP process answering")
    assert (section["max_jobs"], section["interval"]) == ("1", "300")
    assert fnode.path.read_text() == file_before  # X-Couch-Persist: false


@pytest.mark.slow
def test_a_put_is_written_to_the_config_file_and_kept_by_a_node_restart(fnode) -> None:
    assert fnode.put("replicator", "max_jobs", "7").json() == "3"
    assert fnode.put("replicator", "max_churn", " 9 ").json() == "20"  # not in the file yet
    assert fnode.put("couch_jobs", "type_check_period_msec", "700").json() == "500"
    written = (
        FILE_TEXT.format(store=fnode.store)
        .replace("max_jobs = 3", "max_jobs = 7")
        .replace("interval = 60000\n", "interval = 60000\nmax_churn = 9\n")
        .replace("type_check_period_msec = 500", "type_check_period_msec = 700")
    )
    assert fnode.path.read_text() == written  # only those lines changed
    # not persisted: running node only
    assert fnode.put("replicator", "max_history", "5", persist=False).json() == "20"
    assert fnode.put("couch_jobs", "type_monitor_holdoff_msec", "60", persist=False).json() == "50"
    assert fnode.path.read_text() == written
    assert fnode.get("replicator")["max_history"] == "5"
    assert fnode.s.settings()["max_history"] == 5
    assert fnode.client.call(JOBS_SERVER, GetCouchJobsInUse(), 10.0)["type_check_period_msec"] == 700

    # the keeper itself: the new one starts from the file (what was written stays, the rest
    # is gone) and hands its values to the scheduler and the queue, which keep running
    keeper, scheduler = fnode.pid(CONFIG_SERVER), fnode.pid(SCHEDULER_NAME)
    os.kill(keeper, signal.SIGKILL)
    wait_until(lambda: fnode.s.settings()["max_history"] == 20, 20, "the new keeper's values in the scheduler")
    settings = fnode.s.settings()
    assert (settings["max_jobs"], settings["max_churn"], settings["max_history"]) == (7, 9, 20)
    assert fnode.pid(CONFIG_SERVER) != keeper and fnode.pid(SCHEDULER_NAME) == scheduler
    assert (fnode.get("replicator")["max_history"], fnode.get("couch_jobs")["type_monitor_holdoff_msec"]) == (
        "20",
        "50",
    )
    assert fnode.put("replicator", "max_history", "6", persist=False).json() == "20"  # reaches it again
    assert fnode.s.settings()["max_history"] == 6

    fnode.stop()
    fnode.start()
    assert fnode.path.read_text() == written
    replicator = fnode.get("replicator")
    assert (replicator["max_jobs"], replicator["max_churn"], replicator["max_history"]) == ("7", "9", "20")
    assert fnode.s.settings()["max_jobs"] == 7
    assert fnode.get("couch_jobs")["type_check_period_msec"] == "700"
    in_use = wait_until(lambda: fnode.client.call(JOBS_SERVER, GetCouchJobsInUse(), 10.0), 20, "the queue up")
    assert in_use["type_check_period_msec"] == 700


def snapshot(node: FileNode) -> tuple:
    """Everything a refused PUT must leave as it was."""
    return (
        node.path.read_bytes(),
        dump(node.db),
        node.get("replicator"),
        node.get("couch_jobs"),
        node.s.settings(),
        node.client.call(JOBS_SERVER, GetCouchJobsInUse(), 10.0),
        [node.pid(name) for name in (CONFIG_SERVER, SCHEDULER_NAME, JOBS_SERVER, HTTP_SERVER_NAME)],
    )


@pytest.fixture(scope="module")
def shared_fnode(tmp_path_factory):
    node = FileNode(tmp_path_factory.mktemp("cfgfile"))
    try:
        yield node
    finally:
        node.close()


@pytest.mark.parametrize("persist", [True, False])
@pytest.mark.parametrize(
    "section, key, value, raw",
    [
        ("replicator", "max_jobs", "-1", None),
        ("replicator", "max_churn", "0", None),
        ("replicator", "interval", "0", None),
        ("replicator", "interval", "4294967296", None),  # beyond any timer (Erlang's limit)
        ("replicator", "interval", "9" * 30, None),
        ("replicator", "max_history", "abc", None),
        ("replicator", "health_threshold", "1.5", None),
        ("replicator", "max_jobs", "", None),
        ("replicator", "max_jobs", "\u0663", None),  # not an ASCII digit
        ("replicator", "doc_owner_timeout", "10", None),  # in the file only
        ("replicator", "bogus", "1", None),
        ("replicator", "max_jobs", 5, None),  # not a JSON string
        ("replicator", "max_jobs", None, b"{not json"),
        ("couch_jobs", "type_check_period_msec", "0", None),  # must be >= 1
        ("couch_jobs", "type_monitor_timeout_msec", "infinityx", None),
        ("couch_jobs", "type_monitor_timeout_msec", "0", None),
        ("couch_jobs", "type_monitor_holdoff_msec", "-1", None),
        ("couch_jobs", "type_monitor_holdoff_msec", "1.5", None),
        ("couch_jobs", "type_monitor_holdoff_msec", "\u0661\u0662", None),  # Arabic-Indic digits are not ASCII digits
        ("couch_jobs", "activity_monitor_max_jitter_msec", "4294967296", None),  # over Erlang's timer limit
        ("couch_jobs", "type_check_max_jitter_msec", "9" * 5000, None),
        ("couch_jobs", "type_check_period_msec", "1 000", None),
        ("couch_jobs", "bogus_key", "1", None),
        ("couch_jobs", "type_monitor_holdoff_msec", 5, None),  # not a JSON string
        ("couch_jobs", "type_monitor_holdoff_msec", None, b'["10"]'),
    ],
)
def test_bad_values_change_nothing_in_store_file_or_actors(shared_fnode, section, key, value, raw, persist) -> None:
    before = snapshot(shared_fnode)
    r = shared_fnode.put(section, key, value, persist=persist, raw=raw)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request" and r.json()["reason"]
    assert snapshot(shared_fnode) == before


def test_a_file_that_cannot_be_rewritten_changes_nothing(shared_fnode) -> None:
    good = shared_fnode.path.read_text()
    try:
        shared_fnode.path.write_text(good + "[replicator]\n")  # a second [replicator]: no longer parses
        before = snapshot(shared_fnode)
        r = shared_fnode.put("replicator", "max_jobs", "2")
        assert r.status_code == 500 and r.json()["error"] == "file_error", r.text
        assert "nothing changed" in r.json()["reason"]
        assert snapshot(shared_fnode) == before
        # the same change, kept out of the file, is fine
        assert shared_fnode.put("replicator", "max_jobs", "2", persist=False).status_code == 200
        assert shared_fnode.s.settings()["max_jobs"] == 2
    finally:
        shared_fnode.path.write_text(good)
        shared_fnode.put("replicator", "max_jobs", "3", persist=False)


# ------------------------------------------------------ the file, line by line


@pytest.mark.parametrize(
    "before, section, key, value, after",
    [
        ("[replicator]\nmax_jobs = 5\n", "replicator", "max_jobs", "7", "[replicator]\nmax_jobs = 7\n"),
        ("[replicator]\nMax_Jobs:5\n", "replicator", "max_jobs", "7", "[replicator]\nMax_Jobs:7\n"),
        ("[replicator]\nmax_jobs =\n", "replicator", "max_jobs", "7", "[replicator]\nmax_jobs = 7\n"),
        (
            "[replicator]\ninterval = 5\n  10\n# c\nmax_jobs = 1\n",
            "replicator",
            "interval",
            "7",
            "[replicator]\ninterval = 7\n# c\nmax_jobs = 1\n",
        ),  # continuation lines go
        (
            "[replicator]\nmax_jobs = 1\n\n# couch_jobs\n[couch_jobs]\n",
            "replicator",
            "max_churn",
            "2",
            "[replicator]\nmax_jobs = 1\nmax_churn = 2\n\n# couch_jobs\n[couch_jobs]\n",
        ),  # after the last setting
        ("[replicator]", "replicator", "max_jobs", "2", "[replicator]\nmax_jobs = 2\n"),
        ("[node]\nport = 1", "replicator", "max_jobs", "2", "[node]\nport = 1\n\n[replicator]\nmax_jobs = 2\n"),
        ("", "couch_jobs", "type_check_period_msec", "2", "[couch_jobs]\ntype_check_period_msec = 2\n"),
        (
            "[couch_jobs]\nmax_jobs = 1\n[replicator]\nmax_jobs = 1\n",
            "replicator",
            "max_jobs",
            "2",
            "[couch_jobs]\nmax_jobs = 1\n[replicator]\nmax_jobs = 2\n",
        ),  # the right section only
    ],
)
def test_write_value_changes_one_line(tmp_path, before, section, key, value, after) -> None:
    path = tmp_path / "node.ini"
    path.write_text(before)
    path.chmod(0o640)
    link = tmp_path / "link.ini"
    link.symlink_to(path)
    write_value(link, section, key, value)
    assert path.read_text() == after
    assert link.is_symlink() and path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.ini", "node.ini"]  # no temporary file left


def test_write_value_refuses_a_file_it_cannot_rewrite(tmp_path) -> None:
    path = tmp_path / "node.ini"
    with pytest.raises(ConfigWriteError, match="cannot read"):
        write_value(path, "replicator", "max_jobs", "2")
    path.write_text("max_jobs = 1\n")  # no section header
    with pytest.raises(ConfigWriteError, match="does not parse"):
        write_value(path, "replicator", "max_jobs", "2")
    assert path.read_text() == "max_jobs = 1\n"
