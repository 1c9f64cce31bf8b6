"""Hostile HTTP at the protocol level: bodies nested too deep, settings no timer
can hold, and the requests waitress refuses before the app sees them.

One node for the module (the ``n`` fixture of ``conftest.py``). What holds:

1. A JSON body nested deeper than ``actors.http.request.MAX_JSON_DEPTH`` (the
   store's limit for documents and job data), up to far beyond Python's
   recursion limit, is a 400 ``bad_request`` on every endpoint that reads
   JSON; nothing is written, nothing crashes. A body exactly that deep is
   read as any other.
2. ``PUT /_node/_local/_config/replicator/interval`` with a value beyond any
   timer is a 400; the scheduler keeps its settings and is not restarted.
3. What waitress refuses itself (a malformed request line or header, a
   lower-case method, a bad Content-Length or chunk, a chunk announcing more
   than the server's body cap, a body over that cap, a header block over
   64 KiB, a Transfer-Encoding other than chunked) gets an answer with
   CouchDB's shape: its status, ``Content-Type: application/json`` and
   ``{"error", "reason"}`` (``bad_request`` 400, ``too_large`` 413 and 431,
   ``not_implemented`` 501), never a text page or a silent close.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from actors.http.request import MAX_BODY, MAX_JSON_DEPTH

from .http import Reply, describe, exchange, is_couch_error, request, request_bytes
from .node import IDLE
from .test_http import PROTOCOL_JUNK

pytestmark = pytest.mark.timeout(300)

FEW = settings(max_examples=10, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

JSON_ENDPOINTS = [
    ("POST", "/_replicate"),
    ("PUT", "/_replicator/deep"),
    ("PUT", "/_node/_local/_config/replicator/max_jobs"),
    ("PUT", "/_node/_local/_config/couch_jobs/type_check_period_msec"),
    ("POST", "/_session"),
    ("POST", "/_jobs/hostile"),
]
#: The CouchDB error of each status waitress refuses a request with.
WAITRESS_ERRORS = {400: "bad_request", 413: "too_large", 431: "too_large", 501: "not_implemented"}


def couch_shaped(reply: Reply) -> bool:
    """``{"error": str, "reason": str}`` JSON, whatever the status (``is_couch_error`` takes 4xx only)."""
    if not reply.headers.get("content-type", "").startswith("application/json"):
        return False
    try:
        body = json.loads(reply.body)
    except ValueError:
        return False
    return (
        isinstance(body, dict) and set(body) == {"error", "reason"} and all(isinstance(v, str) for v in body.values())
    )


def nested(depth: int) -> bytes:
    """A JSON object whose containers nest ``depth`` deep."""
    return b'{"a":' * (depth - 1) + b"[]" + b"}" * (depth - 1)


@FEW
@given(depth=st.integers(990, 200_000), opener=st.sampled_from([b"[", b'{"a":', b'[{"a":']))
@example(depth=100_000, opener=b"[")
def test_deeply_nested_json_is_a_bad_request(n, depth, opener) -> None:
    payload = (opener * depth)[:MAX_BODY]  # a longer body is a 413 too_large
    for method, path in JSON_ENDPOINTS:
        before = n.store.snapshot()
        reply = request(n.http_port, method, path, payload)
        assert reply.status == 400 and is_couch_error(reply) and reply.json()["error"] == "bad_request", (
            f"{method} {path}: {describe(reply)}"
        )
        assert n.store.snapshot() == before
    n.check()


@FEW
@given(depth=st.integers(MAX_JSON_DEPTH + 1, 989))
@example(depth=MAX_JSON_DEPTH + 1)
def test_json_deeper_than_the_store_takes_is_a_bad_request(n, depth) -> None:
    """Below the parser's limit too: a job's options that deep would not even reach the scheduler."""
    options = nested(depth - 1)
    for method, path, body in [
        ("POST", "/_replicate", b'{"handler": "%s", "options": %s}' % (IDLE.encode(), options)),
        ("PUT", "/_replicator/deep", b'{"handler": "%s", "x": %s}' % (IDLE.encode(), options)),
        ("POST", "/_session", b'{"name": %s, "password": "p"}' % options),
        ("POST", "/_jobs/hostile", b'{"data": {"x": %s}}' % options),
    ]:
        before = n.store.snapshot()
        reply = request(n.http_port, method, path, body)
        assert reply.status == 400 and is_couch_error(reply) and reply.json()["error"] == "bad_request", (
            f"{method} {path}: {describe(reply)}"
        )
        assert n.store.snapshot() == before
    assert n.s.jobs() == []
    n.check()


def test_json_as_deep_as_the_store_takes_is_read(n) -> None:
    body = b'{"replication_id": "deep", "handler": "%s", "options": %s}' % (IDLE.encode(), nested(MAX_JSON_DEPTH - 1))
    try:
        reply = request(n.http_port, "POST", "/_replicate", body)
        assert reply.status == 202, describe(reply)
        assert [job["id"] for job in n.s.jobs()] == ["deep"]
    finally:
        n.undo()
    n.check()


@FEW
@given(value=st.integers(86_400_000_000_000_001, 10**4000))
@example(value=100_000_000_000_000_000)
def test_an_interval_beyond_any_timer_is_a_bad_request(n, value) -> None:
    try:
        reply = request(n.http_port, "PUT", "/_node/_local/_config/replicator/interval", str(value))
        assert reply.status == 400 and is_couch_error(reply), describe(reply)
        assert n.s.settings() == n.settings
        n.check()
    finally:
        n.undo(None, n.couch_jobs)


@pytest.mark.parametrize(
    "data, statuses",
    [
        case for case in PROTOCOL_JUNK if case[1] & {None, 400, 413, 431, 501} and case[0].strip()
    ],  # blank lines and EOF: no request, no answer
    ids=lambda v: repr(v)[:40] if isinstance(v, bytes) else "",
)
def test_errors_waitress_gives_are_couchdb_shaped(n, data, statuses) -> None:
    reply = exchange(n.http_port, data, half_close=True)
    assert reply.status is not None, f"no answer to {data[:80]!r}"
    if reply.status < 400:
        return  # this case is accepted, not refused
    assert reply.status in statuses and couch_shaped(reply), describe(reply)
    if reply.status in WAITRESS_ERRORS:
        assert reply.json()["error"] == WAITRESS_ERRORS[reply.status], describe(reply)
    n.check()


def test_a_chunk_larger_than_the_server_takes_is_refused_at_once(n) -> None:
    """Its size line is enough: no need to wait for (or half-close before) the body."""
    data = b"POST /_replicate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n"
    reply = exchange(n.http_port, data)
    assert reply.status == 413 and is_couch_error(reply) and reply.json()["error"] == "too_large", describe(reply)
    n.check()


@pytest.mark.parametrize("method", [b"get", b"Get", b"pUT"])
def test_a_lower_case_method_gets_a_couchdb_error(n, method) -> None:
    reply = exchange(n.http_port, request_bytes(method.decode(), "/_up"), half_close=True)
    assert reply.status == 400 and is_couch_error(reply) and reply.json()["error"] == "bad_request", describe(reply)


@pytest.mark.parametrize(
    "body, reason",
    [
        (b'{"handler": ', "the body is not JSON: Expecting value at line 1 column 13"),
        (b'{"a": 1} x', "the body is not JSON: Extra data at line 1 column 10"),
        (b'{"a": "\xc3("}', "the body is not UTF-8: invalid continuation byte at byte 7"),
        (b"\xff\xfe{\x00}\x00", "the body is not UTF-8: invalid start byte at byte 0"),
    ],
)
def test_a_body_that_is_not_utf8_json_says_what_is_wrong_and_where(n, body, reason) -> None:
    for method, path in JSON_ENDPOINTS:
        before = n.store.snapshot()
        reply = request(n.http_port, method, path, body)
        assert reply.status == 400 and is_couch_error(reply), f"{method} {path}: {describe(reply)}"
        assert reply.json() == {"error": "bad_request", "reason": reason}, f"{method} {path}"
        assert n.store.snapshot() == before
