"""``/_jobs`` on a real node: per-type counts, pages by state, one job whole,
and clear errors for bad parameters, unknown types and jobs."""

from __future__ import annotations

import time
import urllib.parse

import pytest

import fdblayer
from actors import jobs
from actors.settings.config import Config
from actors.workers.context import encode_result
from fdblayer.jobs import work
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L

from .http_fixtures import HttpNode

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def n(tmp_path_factory):
    config = Config()
    config.set("node", "store", f"sqlite:///{tmp_path_factory.mktemp('httpjobs')}/store.db")
    node = HttpNode(config)
    try:
        db = fdblayer.open(config.get("node", "store"))
        try:
            yield node, db
        finally:
            db.close()
    finally:
        node.stop()


@pytest.fixture(scope="module")
def filled(n):
    """Type ``mail``: 3 due, 2 delayed, 1 running, 1 succeeded, 1 failed (through the pools'
    transitions); type ``empty`` with no job."""
    node, db = n
    jobs.set_type_timeout(db, "mail", 30)
    jobs.set_type_timeout(db, "empty", 5)
    for i in range(3):
        jobs.enqueue(db, "mail", {"to": f"due{i}", "body": "x" * 500}, id=f"due{i}")
    for i in range(2):
        jobs.enqueue(db, "mail", {"to": f"later{i}"}, id=f"later{i}", delay=3600)
    for i, kind in enumerate(["ok", "fail", None]):
        jobs.enqueue(db, "mail", {"to": f"w{i}"}, id=f"w{i}", max_attempts=1)
    claimed = {c.job.id: c for c in work.claim(db, L, "mail", time.time(), 10, "host-a", 3).claimed}
    ends = [work.Outcome(claimed[i].job, "ok", encode_result("ok")) for i in claimed if i.startswith("due")]
    ends += [
        work.Outcome(claimed["w0"].job, "ok", b"\x01"),
        work.Outcome(claimed["w1"].job, "fail", None, {"type": "ValueError", "message": "bad", "traceback": ""}),
    ]
    work.complete(db, L, ends, time.time())
    work.mark_started(db, L, [(claimed["w2"].job, time.time())])  # its handler runs: running, not claimed
    return node, db


def get(node, path: str, status: int = 200):
    reply = node.request("GET", path)
    assert reply.status == status, (reply.status, reply.json())
    return reply.json()


def test_the_types_with_their_counts(filled):
    node, _ = filled
    types = {t["type"]: t for t in get(node, "/_jobs")["types"]}
    mail = types["mail"]
    assert (mail["jobs"], mail["pending"], mail["scheduled"], mail["running"], mail["finished"], mail["failed"]) == (
        8,
        2,
        2,
        1,
        5,
        1,
    )
    assert mail["timeout"] == 30 and types["empty"]["jobs"] == 0


def test_pages_by_state(filled):
    node, _ = filled
    running = get(node, "/_jobs/mail?state=running")
    assert running["total_rows"] == 1 and [j["id"] for j in running["jobs"]] == ["w2"]
    assert running["jobs"][0]["worker"] == "host-a" and running["jobs"][0]["attempt"] == 1
    failed = get(node, "/_jobs/mail?state=failed")
    assert [j["id"] for j in failed["jobs"]] == ["w1"] and failed["jobs"][0]["error"]["message"] == "bad"
    pending = get(node, "/_jobs/mail?state=pending")
    assert [j["id"] for j in pending["jobs"]] == ["later0", "later1"]  # in due order
    page = get(node, "/_jobs/mail?limit=3&skip=2")
    assert page["total_rows"] == 8 and page["offset"] == 2 and len(page["jobs"]) == 3
    finished = get(node, "/_jobs/mail?state=finished&limit=10")
    assert {j["id"] for j in finished["jobs"]} == {"due0", "due1", "due2", "w0", "w1"}
    assert all(
        isinstance(j["data"], str) and j["data"].endswith("...") for j in finished["jobs"] if j["id"].startswith("due")
    ), "long data is cut in a page"


def test_one_job_whole(filled):
    node, _ = filled
    job = get(node, "/_jobs/mail/due1")
    assert job["data"] == {"to": "due1", "body": "x" * 500} and job["outcome"] == "succeeded"
    assert job["result"] == "ok"


@pytest.mark.parametrize(
    "path,status,words",
    [
        ("/_jobs/nosuchtype", 404, "no job type"),
        ("/_jobs/mail/nosuchjob", 404, "no job"),
        ("/_jobs/mail?state=sleeping", 400, "state must be one of"),
        ("/_jobs/mail?limit=-1", 400, "limit must be between"),
        ("/_jobs/mail?limit=5000", 400, "limit must be between"),
        ("/_jobs/mail?skip=x", 400, "skip must be an integer"),
        ("/_jobs/mail/due0/extra", 404, "missing"),
        # names past the store's key limit (found by a review: 500 KeyTooLarge before)
        ("/_jobs/" + "x" * 20000, 400, "exceeds the limit"),
        ("/_jobs/mail/" + "x" * 20000, 400, "exceeds the limit"),
        ("/_utils/jobs/mail/" + "x" * 20000, 400, "exceeds the limit"),
    ],
)
def test_bad_requests_say_what_is_wrong(filled, path, status, words):
    node, _ = filled
    body = get(node, path, status)
    assert words in body["reason"] and body["error"] in ("not_found", "bad_request")


def test_bad_writes_change_nothing(filled):
    node, _ = filled
    before = get(node, "/_jobs/mail?limit=1000")
    for method, path, body, status in [
        ("PUT", "/_jobs/mail", {}, 405),
        ("POST", "/_jobs", {}, 405),
        ("POST", "/_jobs/mail", {"x": 1}, 400),
        ("POST", "/_jobs/mail", [1], 400),
        ("POST", "/_jobs/mail", {"data": [1, 2]}, 400),
        ("POST", "/_jobs/mail", {"data": {}, "delay": -5}, 400),
        ("POST", "/_jobs/mail", {"data": {}, "max_attempts": 0}, 400),
        ("POST", "/_jobs/nosuch", {"data": [1]}, 400),
        ("DELETE", "/_jobs/mail/nosuch", None, 404),
        ("POST", "/_jobs/mail/w2/_retry", None, 409),
        ("POST", "/_jobs/mail/nosuch/_retry", None, 404),
    ]:
        reply = node.request(method, path, body)
        assert reply.status == status, (method, path, body, reply.status, reply.json())
        assert reply.json()["error"] and reply.json().get("reason") is not None
    assert get(node, "/_jobs/mail?limit=1000") == before
    assert get(node, "/_jobs/nosuch", 404)["error"] == "not_found", "a refused POST declares no type"


def test_writes_a_page_of_another_site_could_make_are_refused(filled):
    """A browser on another site can post a form's body (no preflight) or say
    where it comes from: neither enqueues, retries, pauses nor removes."""
    node, db = filled
    before = get(node, "/_jobs/mail?limit=1000")
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        for path in ("/_jobs/mail", "/_jobs/mail/_pause", "/_jobs/mail/failing/_retry"):
            reply = node.request("POST", path, b'{"data": {}}', headers={"Content-Type": ctype})
            assert reply.status == 415 and reply.json()["error"] == "bad_content_type", (ctype, path)
    for site in ("cross-site", "same-site"):
        for method, path in (("POST", "/_jobs/mail"), ("DELETE", "/_jobs/mail/due0"), ("POST", "/_jobs/mail/_pause")):
            reply = node.request(
                method, path, {"data": {}}, headers={"Sec-Fetch-Site": site, "Content-Type": "application/json"}
            )
            assert reply.status == 403 and reply.json()["error"] == "forbidden", (site, method, path)
    assert get(node, "/_jobs/mail?limit=1000") == before
    assert (
        node.request(
            "POST",
            "/_jobs/xsite",
            {"data": {}, "id": "same-origin"},
            headers={"Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
        ).status
        == 201
    )
    assert node.request("DELETE", "/_jobs/xsite/same-origin", headers={"Sec-Fetch-Site": "none"}).status == 200


def test_the_documents_holds_are_not_written_over_http(filled):
    node, db = filled
    for method, path, body in (
        ("POST", "/_jobs/_replicator_docs", {"data": {}}),
        ("DELETE", "/_jobs/_replicator_docs/x", None),
        ("POST", "/_jobs/_replicator_docs/_pause", None),
        ("POST", "/_jobs/_replicator_docs/x/_retry", None),
    ):
        reply = node.request(method, path, body)
        assert reply.status == 403 and "_replicator_docs" in reply.json()["reason"], (method, path)


def test_a_post_on_a_new_type_declares_it_with_the_default_timeout(filled):
    node, db = filled
    assert jobs.get_type_timeout(db, "fresh-over-http") is None
    reply = node.request("POST", "/_jobs/fresh-over-http", {"data": {"n": 1}, "id": "first"})
    assert reply.status == 201 and reply.json() == {"ok": True, "id": "first"}
    assert jobs.get_type_timeout(db, "fresh-over-http") == 30.0
    assert get(node, "/_jobs/fresh-over-http/first")["state"] == "pending"


def test_priority_timeout_and_pause_over_http(filled):
    node, db = filled
    jobs.set_type_timeout(db, "prio-http", 30)
    reply = node.request("POST", "/_jobs/prio-http", {"data": {}, "id": "p", "priority": 3, "timeout": 5})
    assert reply.status == 201 and get(node, "/_jobs/prio-http/p")["priority"] == 3
    assert node.request("POST", "/_jobs/prio-http", {"data": {}, "priority": 10}).status == 400
    assert node.request("POST", "/_jobs/prio-http", {"data": {}, "timeout": -1}).status == 400
    paused = node.request("POST", "/_jobs/prio-http/_pause")
    assert paused.status == 200 and paused.json() == {"ok": True, "paused": True, "was_paused": False}
    assert {t["type"]: t for t in get(node, "/_jobs")["types"]}["prio-http"]["paused"] is True
    assert node.request("POST", "/_jobs/prio-http/_resume").json()["was_paused"] is True
    assert {t["type"]: t for t in get(node, "/_jobs")["types"]}["prio-http"]["paused"] is False
    assert node.request("POST", "/_jobs/no-such-type/_pause").status == 404
    assert jobs.get_type_timeout(db, "no-such-type") is None


def test_add_remove_and_retry_over_http(filled):
    node, db = filled
    jobs.set_type_timeout(db, "httpjobs", 30)
    reply = node.request("POST", "/_jobs/httpjobs", {"data": {"to": "http"}, "id": "viahttp", "delay": 3600})
    assert reply.status == 201 and reply.json() == {"ok": True, "id": "viahttp"}
    job = get(node, "/_jobs/httpjobs/viahttp")
    assert job["state"] == "pending" and job["data"] == {"to": "http"} and job["scheduled_time"] > time.time()
    assert node.request("DELETE", "/_jobs/httpjobs/viahttp").status == 200
    assert get(node, "/_jobs/httpjobs/viahttp", 404)["error"] == "not_found"
    fresh = node.request("POST", "/_jobs/httpjobs", {"data": {"n": 1}, "max_attempts": 1, "timeout": 7}).json()["id"]
    assert len(fresh) == 32
    [claimed] = work.claim(db, L, "httpjobs", time.time(), 5, "host-b", 3).claimed
    work.complete(
        db, L, [work.Outcome(claimed.job, "fail", None, {"type": "E", "message": "m", "traceback": ""})], time.time()
    )

    def counts() -> dict:
        return {t["type"]: t for t in get(node, "/_jobs")["types"]}["httpjobs"]

    assert counts()["failed"] == 1
    assert node.request("POST", f"/_jobs/httpjobs/{fresh}/_retry").status == 201
    retried = get(node, f"/_jobs/httpjobs/{fresh}")
    assert retried["state"] == "pending" and retried["attempt"] == 0 and retried["data"] == {"n": 1}
    assert retried["max_attempts"] == 1 and retried["time_limit"] == 7  # the job's own limits come back with it
    assert counts()["failed"] == 0 and counts()["pending"] == 1


def test_a_type_name_is_a_path_segment(filled):
    node, db = filled
    jobs.set_type_timeout(db, "a/b c", 10)
    jobs.enqueue(db, "a/b c", {}, id="one")
    quoted = urllib.parse.quote("a/b c", safe="")
    assert [j["id"] for j in get(node, f"/_jobs/{quoted}")["jobs"]] == ["one"]


def test_the_queue_in_prometheus_and_stats(filled):
    node, _ = filled
    reply = node.request("GET", "/_node/_local/_prometheus")
    text = reply.body.decode()
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    for line in (
        'otpjobs_jobs{state="running",type="mail"} 1.0',
        'otpjobs_jobs{state="scheduled",type="mail"} 2.0',
        'otpjobs_jobs{state="failed",type="mail"} 1.0',
        'otpjobs_job_events_total{event="added",type="mail"} 8.0',
        'otpjobs_job_events_total{event="started",type="mail"} 6.0',
        'otpjobs_job_events_total{event="succeeded",type="mail"} 4.0',
        'otpjobs_job_events_total{event="failed_final",type="mail"} 1.0',
        "# TYPE couchdb_couch_replicator_jobs_avg_pending gauge",
    ):
        assert line in text, line
    mail = node.request("GET", "/_node/_local/_stats/couch_jobs/mail").json()
    assert mail["running"] == {"value": 1, "type": "gauge"} and mail["added"]["value"] == 8


def test_workers_shows_each_hosts_last_beat(filled):
    from fdblayer.jobs import hosts

    node, db = filled
    now = time.time()
    hosts.beat(
        db,
        L,
        "host-a",
        {
            "host": "host-a",
            "concurrency": 4,
            "busy": 1,
            "running": [{"type": "mail", "id": "w2", "attempt": 1, "for": 0.5}],
        },
        now,
    )
    hosts.beat(db, L, "host-dead", {"host": "host-dead", "concurrency": 1}, now - 60)
    seen = {h["host"]: h for h in get(node, "/_workers")["hosts"]}
    assert seen["host-a"]["alive"] and seen["host-a"]["running"][0]["id"] == "w2"
    assert not seen["host-dead"]["alive"] and seen["host-dead"]["age"] >= 60
    assert node.request("POST", "/_workers", {}).status == 405
    assert get(node, "/_workers/x", 404)["error"] == "not_found"
    hosts.forget(db, L, "host-a")
    hosts.forget(db, L, "host-dead")


def test_deleting_a_replicator_document_needs_its_revision(n):
    from fdblayer import docs

    node, db = n
    rev = docs.put(db, docs.REPLICATOR_DB, "needsrev", {"handler": "tests.actors.scheduler_fixtures:idle"})
    reply = node.request("DELETE", "/_replicator/needsrev")
    assert reply.status == 409 and f"?rev={rev}" in reply.json()["reason"]
    assert docs.get(db, docs.REPLICATOR_DB, "needsrev").rev == rev, "nothing deleted"
    assert node.request("DELETE", "/_replicator/nosuchdoc").status == 404
    reply = node.request("DELETE", "/_replicator/needsrev", headers={"If-Match": f'"{rev}"'})
    assert reply.status == 200 and reply.json()["ok"] is True


def test_a_scheduler_job_entry_carries_the_seed_documents_top_level_fields():
    from actors.http.monitoring import job_view

    entry = job_view(
        {
            "id": "r1",
            "continuous": True,
            "info": {"docs_read": 10, "docs_written": 9, "checkpointed_source_seq": 42, "source_seq": "50"},
        }
    )
    assert (entry["continuous"], entry["docs_read"], entry["docs_written"], entry["doc_write_failures"]) == (
        True,
        10,
        9,
        0,
    )
    assert (entry["checkpointed_source_seq"], entry["source_seq"]) == ("42", "50")
    assert entry["info"]["docs_read"] == 10, "info keeps every reported stat"


def test_a_stored_record_with_bytes_and_infinities_still_shows_as_json(n):
    """Found by a review (reproduced): a work record another writer left
    with bytes keys or values (msgpack keeps them) made its job's page, and
    its whole type's listing, a 500; an ``inf`` time came out as
    ``Infinity``, which is not JSON."""
    import json

    import msgpack

    node, db = n
    jobs.set_type_timeout(db, "odd", 30)
    job_id = jobs.enqueue(db, "odd", {"x": 1})
    record = {"a": 1, "o": "succeeded", "p": {b"k": b"\xff", "ok": 1}, "e": {b"type": b"X"}, "f": 1.0}
    db.set(L.work_key("odd", job_id), msgpack.packb(record, use_bin_type=True))
    for path in (f"/_jobs/odd/{job_id}", "/_jobs/odd", f"/_utils/jobs/odd/{job_id}"):
        reply = node.request("GET", path)
        assert reply.status == 200, (path, reply.status)
        if path.startswith("/_jobs"):
            json.loads(reply.body, parse_constant=lambda c: pytest.fail(f"{path}: {c} is not JSON"))
    shown = node.request("GET", f"/_jobs/odd/{job_id}").json()
    assert shown["progress"] == {"k": "\\xff", "ok": 1}
