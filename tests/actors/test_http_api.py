"""The HTTP API with no admin configured, on a real node over loopback.

One node for the module (the listener is a supervised process; each test
leaves the scheduler's table as it found it); no process of the node may
outlive ``node.stop()``.
"""

from __future__ import annotations

import os
import re
import signal
import socket

import pytest

from actors.names import HTTP_SERVER
from actors.settings.config import Config
from actors.http.server import HttpStartError, check_bind
from supervision import StartError

from .http_fixtures import FIX, HttpNode, wait_until

pytestmark = pytest.mark.timeout(60)
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(scope="module")
def n():
    config = Config()
    config.set("replicator", "max_jobs", 10)
    config.set("replicator", "stores", "http://, nowhere")  # the jobs' labels below (they run handlers)
    node = HttpNode(config)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def jobs(n):
    """Adds jobs through POST /_replicate; removes whatever is left after the test."""
    added: list[str] = []

    def add(job_id: str, **extra) -> dict:
        r = n.request("POST", "/_replicate", n.handler_job(job_id, **extra))
        assert r.status == 202 and r.json() == {"ok": True, "_local_id": job_id}
        added.append(job_id)
        return r.json()

    yield add
    for job_id in added:
        n.s.remove_job(job_id)


def test_welcome_up_and_head(n) -> None:
    r = n.request("GET", "/")
    body = r.json()
    assert r.status == 200 and r.headers["Content-Type"] == "application/json"
    assert body["couchdb"] == "Welcome" and body["version"] and body["vendor"]["name"] == "otpjobs"
    assert n.request("GET", "/_up").json() == {"status": "ok", "seeds": {}}
    head = n.request("HEAD", "/_scheduler/jobs")
    assert head.status == 200 and head.body == b""
    assert n.request("GET", "//_scheduler//jobs").json()["total_rows"] == 0  # '//' tolerated


def test_jobs_listing_is_couchdb_shaped_sorted_and_paged(n, jobs) -> None:
    for job_id in ("c", "a", "b"):
        jobs(job_id, source="http://adm:secret@example.com/db", target="http://example.com/t")
    wait_until(
        lambda: all(j["pid"] not in (None, "<starting>") for j in n.s.jobs()) and len(n.s.jobs()) == 3,
        what="3 jobs running",
    )
    body = n.request("GET", "/_scheduler/jobs").json()
    assert body["total_rows"] == 3 and body["offset"] == 0
    assert [j["id"] for j in body["jobs"]] == ["a", "b", "c"]
    job = body["jobs"][0]
    assert list(job) == [
        "id",
        "pid",
        "source",
        "target",
        "database",
        "user",
        "doc_id",
        "info",
        "history",
        "node",
        "start_time",
        "continuous",
        "checkpointed_source_seq",
        "source_seq",
        "revisions_checked",
        "missing_revisions_found",
        "docs_read",
        "docs_written",
        "doc_write_failures",
        "bulk_get_docs",
        "bulk_get_attempts",
    ]
    assert (
        job["source"] == "http://adm:*****@example.com/db"
        and "secret" not in n.request("GET", "/_scheduler/jobs").body.decode()
    )
    assert job["target"] == "http://example.com/t"
    assert job["database"] is None and job["doc_id"] is None and job["user"] is None
    assert isinstance(job["pid"], str) and isinstance(job["info"], dict)
    assert job["node"] == f"otpjobs-{n.port}@{socket.gethostname()}"  # as docs name their node
    assert ISO.match(job["start_time"])
    assert [h["type"] for h in job["history"]] == ["started", "added"]
    assert all(ISO.match(h["timestamp"]) and "reason" not in h for h in job["history"])

    page = n.request("GET", "/_scheduler/jobs?limit=2&skip=1").json()
    assert page["total_rows"] == 3 and page["offset"] == 1 and [j["id"] for j in page["jobs"]] == ["b", "c"]
    assert n.request("GET", "/_scheduler/jobs?limit=0").json()["jobs"] == []
    past = n.request("GET", "/_scheduler/jobs?skip=10").json()
    assert past == {"total_rows": 3, "offset": 3, "jobs": []}

    one = n.request("GET", "/_scheduler/jobs/b")
    assert one.status == 200 and one.json()["id"] == "b" and one.json()["source"].endswith("*****@example.com/db")
    missing = n.request("GET", "/_scheduler/jobs/nope")
    assert missing.status == 404 and missing.json() == {"error": "not_found", "reason": "missing"}


@pytest.mark.parametrize(
    "query, reason",
    [
        ("limit=abc", "limit must be an integer"),
        ("skip=abc", "skip must be an integer"),
        ("limit=-1", "limit not in range of [0,infinity]"),
        ("skip=-5", "skip not in range of [0,infinity]"),
    ],
)
def test_jobs_bad_limit_or_skip(n, query, reason) -> None:
    r = n.request("GET", f"/_scheduler/jobs?{query}")
    assert r.status == 400 and r.json() == {"error": "query_parse_error", "reason": reason}


def test_docs_answer_empty_until_permanent_docs_land(n) -> None:
    for path in ("/_scheduler/docs", "/_scheduler/docs/_replicator", "/_scheduler/docs?limit=5&skip=2"):
        r = n.request("GET", path)
        assert r.status == 200 and r.json()["total_rows"] == 0 and r.json()["docs"] == []
    assert n.request("GET", "/_scheduler/docs?skip=2").json()["offset"] == 2
    r = n.request("GET", "/_scheduler/docs/_replicator/some_doc")
    assert r.status == 404 and r.json() == {"error": "not_found", "reason": "missing"}
    r = n.request("GET", "/_scheduler/docs?limit=abc")
    assert r.status == 400 and r.json() == {"error": "query_parse_error", "reason": 'Invalid value for integer: "abc"'}
    r = n.request("GET", "/_scheduler/docs?skip=-1")
    assert r.json()["reason"] == 'Invalid value for positive integer: "-1"'
    assert n.request("GET", "/_scheduler/docs/_replicator/a/b").status == 400


def test_not_found_and_wrong_methods(n) -> None:
    r = n.request("GET", "/_scheduler/bogus")
    assert r.status == 404 and r.json() == {"error": "not found"}
    r = n.request("GET", "/nothing_here")
    assert r.status == 404 and r.json()["error"] == "not_found"
    r = n.request("POST", "/_scheduler/jobs", {})
    assert r.status == 405 and r.headers["Allow"] == "GET,HEAD"
    assert r.json() == {"error": "method_not_allowed", "reason": "Only GET,HEAD allowed"}
    r = n.request("GET", "/_replicate")
    assert r.status == 405 and r.headers["Allow"] == "POST"
    assert n.request("DELETE", "/_node/_local/_config/replicator/max_jobs").status == 405


def test_bad_bodies(n) -> None:
    r = n.request("POST", "/_replicate", b"{not json")
    assert r.status == 400 and r.json()["error"] == "bad_request"
    assert n.request("POST", "/_replicate", b"[1, 2]").status == 400
    r = n.request("POST", "/_replicate", {"continuous": True})
    assert r.status == 400 and "handler" in r.json()["reason"]
    r = n.request("POST", "/_replicate", b"x" * (2 << 20))
    assert r.status == 413 and r.json()["error"] == "too_large"
    assert _raw(n, b"POST /_replicate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (64 << 20)).startswith(
        b"HTTP/1.1 413"
    )  # waitress's own cap, before the body is read
    assert n.s.jobs() == [] and n.request("GET", "/_up").status == 200


def test_replicate_cancel(n, jobs) -> None:
    jobs("to_cancel")
    r = n.request("POST", "/_replicate", {"replication_id": "to_cancel", "cancel": True})
    assert r.status == 200 and r.json() == {"ok": True, "_local_id": "to_cancel"}
    assert n.request("GET", "/_scheduler/jobs/to_cancel").status == 404
    assert n.request("POST", "/_replicate", {"replication_id": "to_cancel", "cancel": True}).status == 404
    # No id given: CouchDB-like replication id from source/target, "+continuous" suffix.
    r = n.request(
        "POST",
        "/_replicate",
        {
            "source": "sqlite:///nowhere/a.db",
            "target": "sqlite:///nowhere/b.db",
            "continuous": True,
            "handler": f"{FIX}:idle",
        },
    )
    rep_id = r.json()["_local_id"]
    assert r.status == 202 and rep_id.endswith("+continuous")
    assert n.request("POST", "/_replicate", {"replication_id": rep_id, "cancel": True}).status == 200


def test_stats_and_prometheus(n, jobs) -> None:
    jobs("s1")
    stats = n.request("GET", "/_node/_local/_stats").json()
    adds = stats["couch_replicator"]["jobs"]["adds"]
    assert adds["type"] == "counter" and adds["value"] >= 1
    assert stats["couch_replicator"]["jobs"]["total"]["value"] >= 1
    leaf = n.request("GET", "/_node/_local/_stats/couch_replicator/jobs/running").json()
    assert leaf["type"] == "gauge"
    assert n.request("GET", "/_node/_local/_stats/nope").status == 404
    r = n.request("GET", "/_node/_local/_prometheus")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = r.body.decode()
    assert "# TYPE couchdb_couch_replicator_jobs_adds_total counter" in text
    assert re.search(r"^couchdb_couch_replicator_jobs_adds_total [1-9]\d*(\.0)?$", text, re.M)


def test_config_change_takes_effect_in_the_scheduler(n, jobs) -> None:
    for i in range(3):
        jobs(f"cfg{i}")
    wait_until(lambda: n.s.stats()["running"] == 3, what="3 running")
    assert n.request("GET", "/_node/_local/_config/replicator/max_jobs").json() == "10"
    r = n.request("PUT", "/_node/_local/_config/replicator/max_jobs", "1")
    assert r.status == 200 and r.json() == "10"
    try:
        assert n.s.settings()["max_jobs"] == 1
        assert n.request("GET", "/_node/_local/_config/replicator").json()["max_jobs"] == "1"
        n.s.reschedule()
        wait_until(lambda: n.s.stats()["running"] == 1, what="the scheduler trimmed to max_jobs=1")
        assert n.request("PUT", "/_node/_local/_config/replicator/interval", "5000").json() == "60000"
        assert n.s.settings()["interval"] == 5000
    finally:
        n.request("PUT", "/_node/_local/_config/replicator/max_jobs", "10")
        n.request("PUT", "/_node/_local/_config/replicator/interval", "60000")
    cj = n.request("GET", "/_node/_local/_config/couch_jobs/type_check_period_msec")
    assert cj.status == 200 and cj.json() == "15000"
    # this node runs no queue tree, so no actor could take a [couch_jobs] change
    # (test_http_config.py changes them on a node that does)
    r = n.request("PUT", "/_node/_local/_config/couch_jobs/type_check_period_msec", "1000")
    assert r.status == 503 and r.json()["error"] == "service_unavailable"
    assert n.request("PUT", "/_node/_local/_config/node/port", "1").status == 403
    assert n.request("GET", "/_node/_local/_config/couch_jobs/bogus").status == 404


def _raw(n, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", n.http_port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):  # these answers all close the connection
                chunks.append(chunk)
        except ConnectionResetError:  # closed with our unread bytes pending
            pass
        return b"".join(chunks)


def _listeners(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp* writes them) listening on ``port``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            addr, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # LISTEN
                out.append(addr)
    return out


def test_listens_on_loopback_only(n) -> None:
    assert _listeners(n.http_port) == ["0100007F"]  # 127.0.0.1, nothing else
    assert n.http_info()["bind_address"] == "127.0.0.1"


def test_no_admin_refuses_a_non_loopback_bind_address() -> None:
    with pytest.raises(HttpStartError, match="no admin is configured"):
        check_bind("0.0.0.0", {})
    check_bind("127.0.0.1", {})
    check_bind("::1", {})
    check_bind("0.0.0.0", {"adm": "-pbkdf2-x,y,1"})
    config = Config()
    config.set("node", "bind_address", "0.0.0.0")
    with pytest.raises(StartError, match="no admin is configured"):
        HttpNode(config)


def test_sigkilled_http_process_comes_back(n) -> None:
    old = n.http_info()["pid"]
    os.kill(old, signal.SIGKILL)
    new = wait_until(lambda: (p := _pid_or_none(n)) not in (None, old) and p, what="a new HTTP process")
    assert new != old
    wait_until(lambda: _up(n), what="the new HTTP process serving")
    assert n.request("GET", "/_scheduler/jobs").status == 200
    assert _listeners(n.http_port) == ["0100007F"]


def _pid_or_none(n):
    try:
        return n.http_info()["pid"]
    except Exception:  # noqa: BLE001 - the actor is being restarted
        return None


def _up(n) -> bool:
    try:
        return n.request("GET", "/_up", timeout=2).status == 200
    except OSError:
        return False


def test_malformed_requests_get_clear_errors_and_the_node_keeps_serving(n) -> None:
    assert _raw(n, b"NOT HTTP AT ALL\r\n\r\n").split(b" ")[1] in (b"400", b"405", b"501")
    huge = b"GET /_up HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (100 << 10) + b"\r\n\r\n"
    answer = _raw(n, huge)
    assert answer == b"" or answer.split(b" ")[1] in (b"400", b"431")  # b"": reset before we read it
    chunked = _raw(
        n,
        b"POST /_replicate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\n{ba\r\n0\r\n\r\n",
    )
    assert chunked.startswith(b"HTTP/1.1 400") and b'"bad_request"' in chunked
    for path in ("/_scheduler/jobs/%ZZ", "/_scheduler/jobs/%C3%28", "/_scheduler/jobs/a%2Fb", "/%00"):
        r = n.request("GET", path)
        assert r.status == 404 and r.json()["error"] in ("not_found", "not found")
    r = n.request("POST", "/_replicate", b'{"source": 1, "target": 2}')
    assert r.status == 400 and r.json()["error"] == "bad_request"
    assert n.request("GET", "/_scheduler/jobs?limit=1e3").status == 400
    assert n.s.jobs() == [] and n.request("GET", "/_up").status == 200


def test_sigkilled_http_actor_takes_its_process_along_and_is_restarted(n) -> None:
    old_pid = n.http_info()["pid"]
    actor_pid = n.client.get_pid(HTTP_SERVER)
    os.kill(actor_pid, signal.SIGKILL)
    wait_until(lambda: not _alive(old_pid), what="the old HTTP process gone with its actor (PR_SET_PDEATHSIG)")
    new = wait_until(lambda: (p := _pid_or_none(n)) not in (None, old_pid) and p, what="a new HTTP process")
    assert n.client.get_pid(HTTP_SERVER) != actor_pid and _alive(new)
    wait_until(lambda: _up(n), what="the new HTTP process serving")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False
