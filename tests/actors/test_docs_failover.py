"""Permanent jobs on two real nodes sharing one SQLite file.

Both nodes are ``python -m actors node start`` processes (through
``tests.actors.docs_node_main``, which adds the doc processor to the root
tree if the node does not yet); documents go in over HTTP. Every document
runs on exactly one node (each node's scheduler table is checked); the
node holding most of them is SIGKILLed with its whole process group, and
the other one takes them over within the owner timeout.
"""

from __future__ import annotations

import json
import functools
import itertools
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import fdblayer
from fdblayer import docs as fdocs
from actors import docs, jobs
from actors.http.server import HTTP_SERVER_NAME, GetHttpInfo
from actors.scheduler.client import SchedulerClient
from supervision import connect

from .jobs_fixtures import FAST_COUCH_JOBS, ROOT, dump, free_port, group_pids, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

OWNER_TIMEOUT = 2  # seconds; 1 s leases were lost to scheduling delays on a loaded 2-CPU box
N_DOCS = 20  # the issue: two nodes share 20 permanent jobs with max_jobs 5 each
IDLE = "tests.actors.scheduler_fixtures:idle"
DOC_FIELDS = {
    "database",
    "doc_id",
    "id",
    "node",
    "source",
    "target",
    "source_proxy",
    "target_proxy",
    "state",
    "info",
    "error_count",
    "last_updated",
    "start_time",
}


def _limit_open_files(limit: int) -> None:
    """In the child before exec: at most ``limit`` open files (as ``ulimit -n``)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


class CliNode:
    """A node started by the console command in its own session."""

    def __init__(
        self,
        url: str,
        tmp_path,
        name: str,
        max_jobs: int = 5,
        nofile: int | None = None,
        owner_timeout: int = OWNER_TIMEOUT,
        log_level: str = "warning",
    ) -> None:
        self.port = free_port()
        self.name = name
        cfg = tmp_path / f"{name}.ini"
        cfg.write_text(
            "[couch_jobs]\n"
            + "".join(f"{k} = {v}\n" for k, v in FAST_COUCH_JOBS.items())
            + f"[replicator]\nmax_jobs = {max_jobs}\ninterval = 1000\n"
            f"doc_owner_timeout = {owner_timeout}\n"
            "handlers = tests.actors.scheduler_fixtures\nstores = http://\n"
        )
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            OTPJOBS_RUNTIME_DIR=str(tmp_path),
            THESPLOG_FILE=str(tmp_path / f"{name}-thespian.log"),
        )
        self.log = tmp_path / f"{name}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.actors.docs_node_main",
                    "node",
                    "start",
                    "--store",
                    url,
                    "--port",
                    str(self.port),
                    "--config",
                    str(cfg),
                    "--log-level",
                    log_level,
                    "--http-port",
                    "0",
                ],
                cwd=str(ROOT),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=None if nofile is None else functools.partial(_limit_open_files, nofile),
            )
        self.runtime = tmp_path / f"node-{self.port}.json"
        self.info: dict = {}

    def wait_up(self) -> "CliNode":
        def started():
            if self.proc.poll() is not None:
                raise AssertionError(f"node exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            if not self.runtime.exists():
                return None
            info = json.loads(self.runtime.read_text())
            return info if "pgid" in info and info.get("owner") == self.proc.pid else None

        self.info = wait_until(started, 60, f"node {self.name} to start", step=0.05)
        self.client = connect(self.port)
        self.sched = SchedulerClient(self.client)
        http = wait_until(lambda: self.client.call(HTTP_SERVER_NAME, GetHttpInfo(), 5), 30, "the HTTP listener")
        self.url = f"http://127.0.0.1:{http['port']}"
        return self

    def doc_ids(self) -> list[str]:
        """The documents in this node's scheduler table."""
        return sorted(j["doc_id"] for j in self.sched.jobs() if j["database"] == "_replicator")

    def request(self, method: str, path: str, body=None) -> tuple[int, dict]:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def kill(self) -> None:
        for pgid in (self.proc.pid, self.info.get("pgid")):
            if pgid:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait(10)
        if self.info.get("pgid"):
            wait_until(lambda: not group_pids(self.info["pgid"]), 10, f"every process of {self.name} to be gone")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def cluster(request, tmp_path_factory):
    """Two nodes on one store: an SQLite file, or a PostgreSQL database (the
    nodes then share nothing but the server's address, as on two machines)."""
    tmp = tmp_path_factory.mktemp("docs")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp}/store.db"
    else:
        url = request.getfixturevalue("pg_server").url(prefix=f"docs{os.getpid()}")
    db = fdblayer.open(url)
    nodes = [CliNode(url, tmp, "a"), CliNode(url, tmp, "b")]
    try:
        for n in nodes:
            n.wait_up()
        yield db, nodes
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.kill()
        db.close()


def doc_rows(db) -> list:
    """Every row of the ``_replicator`` documents (not the queue's lease rows, which live)."""
    return [(key, value) for key, value in dump(db) if key.startswith(fdocs.PREFIX)]


def test_replicator_documents_over_http(cluster):
    db, (a, _b) = cluster
    status, body = a.request(
        "PUT", "/_replicator/web1", {"handler": IDLE, "continuous": True, "source": "http://u:pw@h/src"}
    )
    assert status == 201 and body["ok"] is True and body["id"] == "web1" and body["rev"].startswith("1-")
    rev = body["rev"]
    status, got = a.request("GET", "/_replicator/web1")
    assert status == 200 and got == {
        "_id": "web1",
        "_rev": rev,
        "handler": IDLE,
        "continuous": True,
        "source": "http://u:pw@h/src",
    }
    # CouchDB's rules: replacing needs the current _rev
    assert a.request("PUT", "/_replicator/web1", {"handler": IDLE})[0] == 409
    assert a.request("PUT", "/_replicator/web1", {"handler": IDLE, "_rev": "1-nope"})[0] == 409

    def running():
        status, view = a.request("GET", "/_scheduler/docs/_replicator/web1")
        return view if status == 200 and view["state"] == "running" else None

    view = wait_until(running, 20, "web1 to run")
    assert set(view) == DOC_FIELDS
    assert view["database"] == "_replicator" and view["doc_id"] == "web1" and view["id"].endswith("+continuous")
    assert view["source"] == "http://u:*****@h/src" and view["error_count"] == 0
    assert view["node"].startswith("otpjobs-") and view["last_updated"].endswith("Z")

    before = doc_rows(db)  # the documents' rows: the nodes renew their leases meanwhile
    for path, payload, want in (
        ("/_replicator/bad", b"{not json", "bad_request"),
        ("/_replicator/bad", {"source": "only-a-source"}, "bad_request"),
        ("/_replicator/bad", {"handler": IDLE, "options": [1]}, "bad_request"),
        ("/_replicator/bad", ["a", "list"], "bad_request"),
        ("/_replicator/_bad", {"handler": IDLE}, "illegal_docid"),
    ):
        status, body = a.request("PUT", path, payload)
        assert status == 400 and body["error"] == want, (path, payload, body)
    assert doc_rows(db) == before, "bad documents changed nothing"
    assert a.request("GET", "/_replicator/nope") == (404, {"error": "not_found", "reason": "missing"})
    assert a.request("GET", "/_scheduler/docs/_replicator/nope") == (404, {"error": "not_found", "reason": "missing"})
    assert a.request("GET", "/_scheduler/docs?states=bogus")[0] == 400
    assert a.request("GET", "/_scheduler/docs?limit=-1")[1]["reason"] == 'Invalid value for positive integer: "-1"'

    assert a.request("DELETE", "/_replicator/web1?rev=1-nope")[0] == 409
    status, body = a.request("DELETE", f"/_replicator/web1?rev={rev}")
    assert status == 200 and body["ok"] is True
    wait_until(lambda: not any("web1" in n.doc_ids() for n in cluster[1]), 10, "web1 to stop everywhere")
    assert a.request("GET", "/_replicator/web1")[0] == 404
    assert docs.list_docs(db) == (0, [])


def test_each_doc_runs_on_one_node_and_a_killed_nodes_docs_move(cluster):
    db, nodes = cluster
    ids = [f"d{i:02d}" for i in range(N_DOCS)]
    for doc_id in ids:
        assert nodes[0].request("PUT", f"/_replicator/{doc_id}", {"handler": IDLE, "continuous": True})[0] == 201

    def each_once():
        owned = [n.doc_ids() for n in nodes]
        together = sorted(sum(owned, []))
        return owned if together == ids else None

    owned = wait_until(each_once, 20, "every doc to be in exactly one scheduler", step=0.1)
    node_of = {doc_id: n for n, mine in zip(nodes, owned) for doc_id in mine}

    def states_recorded():
        total, page = docs.list_docs(db, "_replicator")
        return total == N_DOCS and all(d.state in ("running", "pending") for d in page) and page

    page = wait_until(states_recorded, 20, "states to be recorded", step=0.1)
    names = {n.name: None for n in nodes}
    for d in page:
        assert str(node_of[d.doc_id].port) in d.node
        names[node_of[d.doc_id].name] = d.node
    # paging, as CouchDB: sorted by doc id, offset = skip
    status, listing = nodes[1].request("GET", "/_scheduler/docs?limit=5&skip=3")
    assert status == 200 and listing["total_rows"] == N_DOCS and listing["offset"] == 3
    assert [d["doc_id"] for d in listing["docs"]] == ids[3:8]
    assert all(set(d) == DOC_FIELDS for d in listing["docs"])
    status, running = nodes[1].request("GET", "/_scheduler/docs/_replicator?states=running&limit=100")
    assert status == 200 and {d["state"] for d in running["docs"]} == {"running"}

    victim = max(nodes, key=lambda n: len(n.doc_ids()))
    survivor = nodes[1] if victim is nodes[0] else nodes[0]
    moved = victim.doc_ids()
    assert moved
    killed_at = time.monotonic()
    victim.kill()

    seen: list = []

    def taken_over():
        seen[:] = [survivor.doc_ids(), [(j.id, j.state.value) for j in jobs.get_jobs(db, docs.DOCS_TYPE)]]
        return seen[0] == ids

    try:
        wait_until(taken_over, 20, "the survivor to take every doc over", step=0.1)
    except AssertionError:
        raise AssertionError(f"not taken over: {seen}\n{survivor.log.read_text()[-3000:]}") from None
    took = time.monotonic() - killed_at
    assert took < 10 * OWNER_TIMEOUT + 5, took

    def recorded_on_survivor():
        _, page = docs.list_docs(db, "_replicator")
        return all(
            d.node == docs.get(db, "_replicator", ids[0]).node
            and str(survivor.port) in d.node
            and d.state in ("running", "pending")
            for d in page
        )

    wait_until(recorded_on_survivor, 20, "every doc's state to name the survivor", step=0.1)
    for doc_id in ids:
        docs.delete(db, "_replicator", doc_id)
    wait_until(lambda: survivor.doc_ids() == [], 10, "deleted docs to stop")


def test_a_cleanly_stopped_nodes_document_runs_elsewhere_only_after_its_run_ended(tmp_path):
    """A node stopped with SIGTERM hands its documents back, but its
    scheduler still gives each run its stop grace: the other node must not
    start the document before that run has ended (the README: a document
    never runs on two nodes at once)."""
    url = f"sqlite:///{tmp_path}/store.db"
    runs = tmp_path / "runs.log"
    nodes = [CliNode(url, tmp_path, "a"), CliNode(url, tmp_path, "b")]
    try:
        for n in nodes:
            n.wait_up()
        options = {"log": str(runs), "linger": 3}
        body = {"handler": "tests.actors.scheduler_fixtures:lingering", "continuous": True, "options": options}
        assert nodes[0].request("PUT", "/_replicator/slow", body)[0] == 201

        def started() -> list[list[str]]:
            lines = [line.split() for line in runs.read_text().splitlines()] if runs.exists() else []
            return [line for line in lines if line[0] == "start"]

        wait_until(started, 20, "the document to start", step=0.05)
        first = next(n for n in nodes if n.doc_ids() == ["slow"])
        other = nodes[1] if first is nodes[0] else nodes[0]
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(30) == 0
        wait_until(lambda: len(started()) == 2, 60, "the other node to run the document", step=0.05)
        assert other.doc_ids() == ["slow"]
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.kill()
    lines = [line.split() for line in runs.read_text().splitlines()]
    (end_of_first,) = [float(line[1]) for line in lines if line[0] == "end"]
    start_of_second = max(float(line[1]) for line in lines if line[0] == "start")
    assert start_of_second >= end_of_first, f"the runs overlapped by {end_of_first - start_of_second:.2f} s: {lines}"


def test_a_restarted_doc_processor_takes_its_documents_back_and_they_run_on(tmp_path):
    """The doc processor is SIGKILLed while a document runs: its successor
    takes back the leases that name this node, renews them at once and
    keeps their scheduler jobs: the document's run never stops (before, it
    was stopped at once and taken up again only once its lease expired)."""
    from actors.names import DOC_PROCESSOR

    node = CliNode(f"sqlite:///{tmp_path}/store.db", tmp_path, "a", owner_timeout=10)
    ledger = tmp_path / "ledger.log"
    try:
        node.wait_up()
        options = {"ledger": str(ledger), "doc": "d1", "tick": 0.2}
        body = {"handler": "tests.actors.scheduler_fixtures:ledger", "continuous": True, "options": options}
        assert node.request("PUT", "/_replicator/d1", body)[0] == 201
        wait_until(lambda: ledger.exists() and "tick" in ledger.read_text(), 30, "d1 running", step=0.05)
        old = node.client.get_pid(DOC_PROCESSOR)
        killed_at = time.time()
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: node.client.get_pid(DOC_PROCESSOR) not in (None, old), 30, "the doc processor restarted")
        time.sleep(12)  # past the owner timeout: its own lease would have expired
        rows = [line.split() for line in ledger.read_text().splitlines()]
        assert [r[0] for r in rows].count("start") == 1, f"d1 was stopped and started again: {rows[-5:]}"
        ticks = [float(r[3]) for r in rows if r[0] == "tick"]
        assert ticks[-1] > time.time() - 2 and max(b - a for a, b in itertools.pairwise(ticks)) < 2.0
        assert ticks[-1] > killed_at + 10
        status, view = node.request("GET", "/_scheduler/docs/_replicator/d1")
        assert status == 200 and view["state"] == "running" and str(node.port) in view["node"]
    finally:
        if node.proc.poll() is None:
            node.kill()
