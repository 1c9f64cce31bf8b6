"""Hostile HTTP to every endpoint of a real node (no admin configured), through raw sockets.

Each request gets a CouchDB-shaped answer with a sensible status, within
:data:`~tests.hostile.http.ANSWER_TIMEOUT` (never a 5xx, never a hang);
the node keeps serving (``/_up`` is 200 after every example, and the
scheduler was never restarted); the store is unchanged unless the request
was a valid write (then the test undoes it).

One node for the module (:class:`~tests.hostile.node.HostileNode`), with
``max_jobs = 0`` so that accepted jobs wait in the scheduler's table (an
example that wants its job started raises it); each example leaves the
scheduler's table, its settings and the ``[couch_jobs]`` values as it
found them.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any
from urllib.parse import quote, unquote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from actors.settings.config import DEFAULTS

from . import strategies as S
from .http import Reply, describe, exchange, is_couch_error, parse, request, request_bytes, segment
from .node import IDLE, SEED, HostileNode

pytestmark = pytest.mark.timeout(300)


def _examples(count: int) -> settings:
    return settings(max_examples=count, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


FEW, SOME, MANY = _examples(15), _examples(40), _examples(80)
REPLICATOR_KEYS = ("max_jobs", "max_churn", "interval", "max_history", "health_threshold")
COUCH_JOBS = dict(DEFAULTS["couch_jobs"])


def undo(n: HostileNode, before: Any, config: bool = False) -> None:
    n.undo(before, n.couch_jobs if config else None)


def is_write(method: str, segments: list[str]) -> bool:
    return method in ("PUT", "DELETE") and segments[:1] == ["_replicator"]


def check_answer(n: HostileNode, method: str, reply: Reply, segments: list[str], before: Any) -> None:
    """The checks every answer must pass; ``before`` is the store's snapshot before the request."""
    assert reply.status is not None, f"no HTTP answer: {reply!r}"
    assert reply.status < 500, f"server error: {describe(reply)}"
    assert b"Traceback" not in reply.body
    if reply.status >= 400:
        assert is_couch_error(reply, method), f"not a CouchDB error: {describe(reply)}"
    if not (is_write(method, segments) and reply.status in (200, 201)):
        assert n.store.snapshot() == before, f"the store changed: {method} {segments} -> {describe(reply)}"


# ------------------------------------------------------------------ requests

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "COPY", "TRACE", "PROPFIND", "X-Y"]
WORDS = [
    "_scheduler",
    "jobs",
    "docs",
    "_replicator",
    "_replicate",
    "_node",
    "_local",
    "_stats",
    "_prometheus",
    "_config",
    "replicator",
    "couch_jobs",
    "max_jobs",
    "interval",
    "_session",
    "_up",
    "_utils",
    "index.html",
    "couch_replicator",
    "seed",
    "nope",
    "_all_dbs",
    "..",
    ".",
    "~",
    "%",
    "%%",
    "%z",
    "%zz",
    "%00",
    "%ff",
    "%C3%28",
    "%ED%A0%80",
    "%2F",
    "%2f_replicator",
    "a%2Fb",
    "+",
    ";",
    "x;y=z",
    "@",
    ":",
    "!",
    "$",
    "'",
    "()",
    "*",
    "_",
    "__",
    "a" * 300,
    "_jobs",
    "_workers",
    "_retry",
    "state",
    "pending",
    "finished",
]
#: Path segments: known words, junk escapes and percent-encoded odd text.
path_segment = st.one_of(st.sampled_from(WORDS), S.odd_text.map(segment))
#: Query strings: known keys with junk values, and junk pairs.
query_value = st.one_of(
    st.integers().map(str),
    st.sampled_from(
        [
            "",
            "-1",
            "1e3",
            "0x10",
            "%205",
            "+5",
            "1_0",
            "abc",
            "nan",
            "9" * 5000,
            "running",
            "failed,bogus",
            ",,",
            "%",
            "%zz",
            "%D9%A3",
        ]
    ),
    S.odd_text.map(lambda t: quote(t, safe="")),
)
query = st.lists(
    st.tuples(st.sampled_from(["limit", "skip", "states", "rev", "x", "", "limit[]"]), query_value), max_size=3
).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
json_body = S.json_value.map(lambda v: json.dumps(v).encode())
body = st.one_of(
    st.none(),
    st.binary(max_size=64),
    json_body,
    st.sampled_from(
        [
            b"",
            b"{",
            b"null",
            b"[]",
            b'"x"',
            b"1e999",
            b"NaN",
            b'{"a":',
            b"\xff\xfe",
            b'"\\ud800"',
            b"[" * 200 + b"]" * 200,
            b'{"handler": "a.b:c", "x": "\\ud800"}',
            b'{"\\udfff": 1, "handler": "a.b:c"}',
            b'{"replication_id": "\\ud800", "handler": "a.b:c"}',
            b'{"handler": 1}',
            b'{"source": "a", "target": "b", "handler": "nope.nope:x", "continuous": false}',
            b'{"replication_id": "x", "cancel": true}',
            b'"5"',
            b'"-1"',
            b'"abc"',
            b'{"name": "a", "password": "b"}',
            b"name=a&password=b",
            b"name=%ff&password=%zz",
        ]
    ),
)
content_type = st.sampled_from(
    [
        None,
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "",
        "*/*",
    ]
)


def _send(n: HostileNode, method: str, target: str, data: bytes | None, ctype: str | None) -> Reply:
    headers = {} if ctype is None else {"Content-Type": ctype}
    return exchange(n.http_port, request_bytes(method, target, data, headers))


@MANY
@given(
    method=st.sampled_from(METHODS),
    segments=st.lists(path_segment, max_size=5),
    query=query,
    slashes=st.sampled_from(["/", "//"]),
    data=body,
    ctype=content_type,
)
@example(
    method="GET", segments=["_scheduler", "docs", "_replicator", "a", "b"], query="", slashes="/", data=None, ctype=None
)
def test_fuzzed_requests_get_couchdb_answers(n, method, segments, query, slashes, data, ctype) -> None:
    target = slashes + "/".join(segments) + (f"?{query}" if query else "")
    decoded = [unquote(s) for s in target.partition("?")[0].split("/") if s]
    before = n.store.snapshot()
    try:
        reply = _send(n, method, target, data, ctype)
        check_answer(n, method.upper(), reply, decoded, before)
    finally:
        undo(n, before, config="_config" in decoded)
    n.check()


# -------------------------------------------------------------- query values


@MANY
@given(
    path=st.sampled_from(["/_scheduler/jobs", "/_scheduler/docs", "/_scheduler/docs/_replicator"]),
    limit=st.none() | query_value,
    skip=st.none() | query_value,
    states=st.none()
    | st.lists(st.sampled_from(["running", "pending", "bogus", "", "%20Running", "failed"]), max_size=3).map(",".join),
)
def test_bad_paging_values_are_query_parse_errors(n, path, limit, skip, states) -> None:
    params = [(k, v) for k, v in (("limit", limit), ("skip", skip), ("states", states)) if v is not None]
    target = path + ("?" + "&".join(f"{k}={v}" for k, v in params) if params else "")
    before = n.store.snapshot()
    reply = request(n.http_port, "GET", target)
    check_answer(n, "GET", reply, [], before)
    if reply.status == 400:
        assert reply.json()["error"] == "query_parse_error", describe(reply)
    else:
        assert reply.status == 200, describe(reply)
        page = reply.json()
        rows = page["jobs"] if path.endswith("jobs") else page["docs"]
        assert isinstance(page["total_rows"], int) and isinstance(page["offset"], int)
        assert len(rows) <= page["total_rows"]


# ------------------------------------------------------------------ bodies

replicate_body = st.fixed_dictionaries(
    {},
    optional={
        "source": st.one_of(
            S.odd_text,
            st.integers(),
            st.none(),
            st.fixed_dictionaries({"url": S.odd_text}),
            st.just("http://adm:secret@example.invalid/db"),
        ),
        "target": st.one_of(S.odd_text, st.booleans(), st.fixed_dictionaries({"url": st.integers()})),
        "handler": st.one_of(
            st.just(IDLE), st.just("nope.nope:x"), S.odd_text, st.integers(), st.lists(st.text(max_size=2))
        ),
        "continuous": st.one_of(st.booleans(), st.integers(0, 1), st.text(max_size=2)),
        "cancel": st.one_of(st.booleans(), st.just("true")),
        "replication_id": st.one_of(S.odd_text, st.integers(), st.none(), st.lists(st.integers(), max_size=1)),
        "id": st.one_of(S.odd_text, st.integers()),
        "options": st.one_of(S.json_value, st.dictionaries(S.odd_text, S.json_leaf, max_size=2)),
        "create_target": st.booleans(),
    },
).filter(lambda b: not any(_is_store_url(b.get(k)) for k in ("source", "target")))


def _is_store_url(value: Any) -> bool:
    """A store URL would make the job open (and create) a store: never from a fuzzer."""
    value = value.get("url") if isinstance(value, dict) else value
    return isinstance(value, str) and value.split(":", 1)[0].strip().lower() in ("sqlite", "fdb")


@SOME
@given(
    payload=st.one_of(replicate_body.map(lambda b: json.dumps(b).encode()), body.filter(lambda b: b is not None)),
    ctype=content_type,
    run=st.sampled_from([False, False, False, True]),
)
def test_replicate_takes_a_valid_job_or_says_why_not(n, payload, ctype, run) -> None:
    before = n.store.snapshot()
    if run:  # start what it accepts (crashing handlers included)
        n.s.set_setting("max_jobs", 10)
    try:
        reply = _send(n, "POST", "/_replicate", payload, ctype)
        check_answer(n, "POST", reply, ["_replicate"], before)
        form = (ctype or "").split(";")[0].strip().lower() in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "text/plain",
        )
        assert reply.status in ((415,) if form else (200, 202, 400, 403, 404, 413)), describe(reply)
        if reply.status == 202:
            assert isinstance(reply.json()["_local_id"], str)
    finally:
        undo(n, before)
    n.check()


doc_body = st.fixed_dictionaries(
    {},
    optional={
        "handler": st.one_of(st.just(IDLE), S.odd_text, st.integers(), st.none()),
        "source": st.one_of(S.odd_text, st.fixed_dictionaries({"url": S.odd_text}), st.integers()),
        "target": st.one_of(S.odd_text, st.just({}), st.none()),
        "continuous": st.one_of(st.booleans(), st.integers(0, 1)),
        "options": st.one_of(S.json_value, st.none()),
        "_id": st.one_of(st.just("doc"), S.odd_text, st.integers()),
        "_rev": st.one_of(S.odd_text, st.integers(), st.none()),
        "extra": S.json_value,
    },
)


@SOME
@given(
    doc_id=st.one_of(st.just("doc"), st.just("seed"), S.odd_id),
    payload=st.one_of(
        doc_body.map(lambda b: json.dumps(b).encode()),
        body.filter(lambda b: b is not None),
        st.integers(1, 3).map(lambda k: json.dumps(dict(SEED, big="x" * (k * 40_000))).encode()),
    ),
    method=st.sampled_from(["PUT", "PUT", "DELETE", "GET", "HEAD", "POST", "COPY"]),
    rev=st.none() | query_value,
)
def test_replicator_documents_are_written_only_when_valid(n, doc_id, payload, method, rev) -> None:
    target = f"/_replicator/{segment(doc_id)}" + ("" if rev is None else f"?rev={rev}")
    before = n.store.snapshot()
    try:
        reply = _send(n, method, target, payload if method in ("PUT", "POST") else None, "application/json")
        check_answer(n, method, reply, ["_replicator", doc_id], before)
        if reply.status in (200, 201) and method in ("PUT", "DELETE"):
            body = reply.json()
            assert body["ok"] is True and body["id"] == doc_id and isinstance(body["rev"], str)
    finally:
        undo(n, before)
    n.check()


config_value = st.one_of(
    st.integers(-10, 10**9).map(str),
    st.sampled_from(["", " 5 ", "1.5", "abc", "infinity", "true", "-0", "0", "1e3", "9" * 5000, "\u0663", "1_0"]),
    S.odd_text,
    st.integers(),
    st.none(),
    st.lists(st.integers(), max_size=1),
)


@SOME
@given(
    section=st.sampled_from(["replicator", "couch_jobs", "admins", "node", "nope"]),
    key=st.one_of(st.sampled_from(list(REPLICATOR_KEYS) + list(COUCH_JOBS) + ["bogus", ""]), S.odd_id.map(segment)),
    value=config_value,
    raw=st.none() | body,
    method=st.sampled_from(["PUT", "GET", "DELETE", "POST", "HEAD"]),
)
def test_config_changes_only_what_it_can(n, section, key, value, raw, method) -> None:
    payload = json.dumps(value).encode() if raw is None else raw
    before = n.store.snapshot()
    try:
        reply = _send(
            n,
            method,
            f"/_node/_local/_config/{section}/{key}",
            payload if method == "PUT" else None,
            "application/json",
        )
        check_answer(n, method, reply, [], before)
        if reply.status == 200 and method == "PUT":
            assert isinstance(reply.json(), str)  # the old value
    finally:
        undo(n, before, config=True)
    n.check()


@SOME
@given(
    payload=body,
    ctype=content_type,
    method=st.sampled_from(["POST", "GET", "DELETE", "PUT", "HEAD"]),
    auth=st.none() | st.sampled_from(["Basic", "Basic !!!", "Basic " + "QQ==" * 2000, "Bearer x", "Basic YTpi"]),
    cookie=st.none()
    | st.sampled_from(["AuthSession=", "AuthSession=%%%", "AuthSession=YTox" * 50, "a=b; c", 'AuthSession="x"']),
)
def test_session_answers_are_couchdb_shaped(n, payload, ctype, method, auth, cookie) -> None:
    headers = {k: v for k, v in (("Authorization", auth), ("Cookie", cookie)) if v is not None}
    if ctype is not None:
        headers["Content-Type"] = ctype
    before = n.store.snapshot()
    reply = exchange(n.http_port, request_bytes(method, "/_session", payload, headers))
    check_answer(n, method, reply, [], before)
    if method == "POST":
        assert reply.status in (400, 401, 415), describe(reply)  # no admin: nobody can log in
    elif method in ("GET", "HEAD", "DELETE"):
        assert reply.status == 200, describe(reply)


# --------------------------------------------------------- valid odd requests


RESERVED = ("handler", "source", "target", "continuous", "options", "_id", "_rev")


@FEW
@given(doc_id=S.odd_id.filter(lambda s: not s.startswith("_") and s != "seed"), extra=S.json_data)
def test_odd_document_ids_round_trip_through_percent_encoding(n, doc_id, extra) -> None:
    path = f"/_replicator/{segment(doc_id)}"
    body = dict({k: v for k, v in extra.items() if k not in RESERVED}, **SEED)
    try:
        put = request(n.http_port, "PUT", path, body)
        assert put.status == 201 and put.json()["id"] == doc_id, describe(put)
        got = request(n.http_port, "GET", path)
        assert got.status == 200 and got.json()["_id"] == doc_id and got.json()["_rev"] == put.json()["rev"]
        assert {k: v for k, v in got.json().items() if k not in ("_id", "_rev")} == body
        view = request(n.http_port, "GET", f"/_scheduler/docs/_replicator/{segment(doc_id)}")
        assert view.status == 200 and view.json()["doc_id"] == doc_id, describe(view)
        gone = request(n.http_port, "DELETE", f"{path}?rev={quote(put.json()['rev'])}")
        assert gone.status == 200, describe(gone)
        assert request(n.http_port, "GET", path).status == 404
    finally:
        undo(n, None)


@FEW
@given(job_id=S.odd_id)
def test_odd_job_ids_round_trip_through_percent_encoding(n, job_id) -> None:
    """(The job waits in the table: max_jobs is 0.)"""
    try:
        r = request(n.http_port, "POST", "/_replicate", {"replication_id": job_id, "handler": IDLE, "continuous": True})
        assert r.status == 202 and r.json()["_local_id"] == job_id, describe(r)
        got = request(n.http_port, "GET", f"/_scheduler/jobs/{segment(job_id)}")
        assert got.status == 200 and got.json()["id"] == job_id, describe(got)
        listed = request(n.http_port, "GET", "/_scheduler/jobs").json()
        assert [j["id"] for j in listed["jobs"]] == [job_id]
        cancel = request(n.http_port, "POST", "/_replicate", {"replication_id": job_id, "cancel": True})
        assert cancel.status == 200, describe(cancel)
        assert request(n.http_port, "GET", f"/_scheduler/jobs/{segment(job_id)}").status == 404
    finally:
        undo(n, None)
    n.check()


# --------------------------------------------------------------- the protocol


def _sensible(reply: Reply) -> bool:
    """An answer or a closed connection, never a server error (but 501 and 505, which are the client's)."""
    return reply.status is None or reply.status < 500 or reply.status in (501, 505)


#: Malformed HTTP and the status waitress (or the app) gives it today; None: closed with no answer.
PROTOCOL_JUNK = [
    (b"NOT HTTP AT ALL\r\n\r\n", {400}),
    (b"\r\n\r\n", {None, 400}),
    (b"GET\r\n\r\n", {400}),
    (b"GET /_up\r\n\r\n", {200, 400}),
    (b"GET /_up HTTP/9.9\r\nHost: x\r\n\r\n", {200, 505}),
    (b"GET /_up HTTP/1.1 extra\r\nHost: x\r\n\r\n", {400}),
    (b"GET /_u p HTTP/1.1\r\nHost: x\r\n\r\n", {400}),
    (b"get /_up HTTP/1.1\r\nHost: x\r\n\r\n", {400, 405}),
    (b"G\x00T /_up HTTP/1.1\r\nHost: x\r\n\r\n", {400, 405}),
    (b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404}),
    (b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404}),
    (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404}),
    (b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404, 405}),
    (b"GET http://evil.invalid/_up HTTP/1.1\r\nHost: x\r\n\r\n", {200, 400}),
    (b"GET /_up HTTP/1.1\r\nNo colon here\r\n\r\n", {400}),
    (b"GET /_up HTTP/1.1\r\nHost: x\r\n folded: continuation\r\n\r\n", {200, 400}),
    (b"GET /_up HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", {400}),
    (b"GET /_up HTTP/1.1\r\nHost: x\r\nX: \x00\x01\x7f\r\n\r\n", {400}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", {400}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", {400}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", {400}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", {413}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n", {413}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", {501}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n", {400}),
    (b"POST /_replicate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n\r\n", {400}),
    (
        b"POST /_replicate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
        {400},
    ),
    (
        b"POST /_replicate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
        {None, 400, 413},
    ),
    (b"GET /_up HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (100 << 10) + b"\r\n\r\n", {None, 400, 431}),
    (
        b"GET /_up HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(5000)) + b"\r\n",
        {200, 400, 431},
    ),
    (b"GET /" + b"a" * (80 << 10) + b" HTTP/1.1\r\nHost: x\r\n\r\n", {None, 400, 414, 431}),
]


@pytest.mark.parametrize("data, statuses", PROTOCOL_JUNK, ids=range(len(PROTOCOL_JUNK)))
def test_malformed_http_gets_a_client_error_and_the_node_keeps_serving(n, data, statuses) -> None:
    before = n.store.snapshot()
    reply = exchange(n.http_port, data, half_close=True)
    assert reply.status in statuses, describe(reply)
    if reply.status is not None and reply.status >= 400 and reply.headers.get("content-type") == "application/json":
        # 501 (a Transfer-Encoding waitress does not know) is CouchDB's not_implemented, the one 5xx expected here
        assert is_couch_error(reply) or reply.status == 501 and reply.json().get("error") == "not_implemented", (
            describe(reply)
        )
    assert b"Traceback" not in reply.raw
    assert n.store.snapshot() == before
    n.check()


@SOME
@given(data=st.binary(min_size=1, max_size=300))
def test_random_bytes_get_a_client_error_or_a_closed_connection(n, data) -> None:
    before = n.store.snapshot()
    reply = exchange(n.http_port, data, half_close=True)  # without it the server rightly waits for more
    assert _sensible(reply), describe(reply)
    assert n.store.snapshot() == before
    n.check()


VALID = [
    request_bytes("PUT", "/_replicator/trunc", json.dumps(SEED).encode(), {"Content-Type": "application/json"}),
    request_bytes(
        "POST",
        "/_replicate",
        json.dumps({"replication_id": "trunc", "handler": IDLE}).encode(),
        {"Content-Type": "application/json"},
    ),
    request_bytes("PUT", "/_node/_local/_config/replicator/max_jobs", b'"7"', {"Content-Type": "application/json"}),
    request_bytes("POST", "/_session", b"name=a&password=b", {"Content-Type": "application/x-www-form-urlencoded"}),
]


@FEW
@given(which=st.integers(0, len(VALID) - 1), cut=st.floats(0.0, 0.999))
def test_a_truncated_request_changes_nothing_and_blocks_nobody(n, which, cut) -> None:
    data = VALID[which][: int(len(VALID[which]) * cut)]
    before = n.store.snapshot()
    with socket.create_connection(("127.0.0.1", n.http_port), timeout=10) as stuck:
        stuck.sendall(data)  # and never the rest: the server waits for it, serving others meanwhile
        n.check()
        stuck.shutdown(socket.SHUT_WR)
        stuck.settimeout(10)
        answer = b""
        try:
            while chunk := stuck.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    reply = parse(answer)
    assert _sensible(reply), describe(reply)
    assert n.store.snapshot() == before
    assert n.s.jobs() == [] and n.s.settings() == n.settings
    n.check()


def test_bodies_between_the_app_cap_and_the_server_cap_are_couchdb_413(n) -> None:
    for size in (1 << 20 | 1, 3 << 20):
        before = n.store.snapshot()
        reply = exchange(
            n.http_port, request_bytes("PUT", "/_replicator/big", b"x" * size, {"Content-Type": "application/json"})
        )
        assert reply.status == 413 and is_couch_error(reply) and reply.json()["error"] == "too_large", describe(reply)
        assert n.store.snapshot() == before
    n.check()


def test_many_clients_at_once_with_hostile_requests(n) -> None:
    """Eight threads send junk while one asks /_up: every answer comes, none is a 5xx."""
    errors: list[str] = []
    junk = [PROTOCOL_JUNK[i][0] for i in (0, 6, 18, 24)] + [request_bytes("POST", "/_replicate", b"{bad")]

    def hammer(k: int) -> None:
        try:
            for i in range(6):
                reply = exchange(n.http_port, junk[(k + i) % len(junk)], half_close=True)
                if not _sensible(reply):
                    errors.append(describe(reply))
        except AssertionError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(8)]
    before = n.store.snapshot()
    for t in threads:
        t.start()
    n.check()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert n.store.snapshot() == before
    n.check()


def test_nothing_of_the_node_listens_beyond_loopback_after_all_that(n) -> None:
    addresses = n.listening()
    assert f"127.0.0.1:{n.http_port}" in addresses and f"127.0.0.1:{n.port}" in addresses
    assert all(a.startswith("127.0.0.1:") for a in addresses), addresses
