"""Hostile credentials against a real node with an admin configured.

Junk ``Authorization`` headers, forged, expired and malformed
``AuthSession`` cookies, and junk ``/_session`` logins get CouchDB's 401
(or 400/415 for a body it cannot read), never a 5xx; nothing is written;
``/`` and ``/_up`` stay open; the admin's real credentials keep working.

One node for the module, its config file holding ``[admins] adm = s3cret``.

(Not tested as junk: the password with NUL bytes appended. PBKDF2-HMAC pads
the password, its HMAC key, with zero bytes, so ``s3cret\\x00`` is the same
key as ``s3cret``; CouchDB's hashes behave the same.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import strategies as S
from .http import describe, exchange, is_couch_error, request, request_bytes
from .node import IDLE, HostileNode

pytestmark = pytest.mark.timeout(300)

SOME = settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SECRET = "ab" * 32
GOOD = {"Authorization": "Basic " + base64.b64encode(b"adm:s3cret").decode()}


@pytest.fixture(scope="module")
def n(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hostile-admin")
    (directory / "node.ini").write_text("[admins]\nadm = s3cret\n")
    node = HostileNode(directory, config_path=str(directory / "node.ini"), secret=SECRET, max_jobs=0)
    node.auth = GOOD
    try:
        node.couch_jobs = node.get("/_node/_local/_config/couch_jobs")
        yield node
    finally:
        node.stop()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def forged_cookie(name: str, stamp: str, key: bytes) -> str:
    mac = hmac.new(key, f"{name}:{stamp}".encode(), hashlib.sha256).digest()
    return _b64(f"{name}:{stamp}:".encode() + mac)


def _not_the_password(credentials: bytes) -> bool:
    return credentials.rstrip(b"\x00") != b"adm:s3cret"


#: Header text waitress passes on: printable Latin-1, no CR/LF.
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=60)
authorization = st.one_of(
    header_text,
    st.tuples(
        st.sampled_from(["Basic ", "basic ", "BASIC  ", "Bearer ", "Digest ", "Basic\t"]),
        st.one_of(
            st.binary(max_size=40).filter(_not_the_password).map(lambda b: base64.b64encode(b).decode()),
            st.tuples(S.odd_text, S.odd_text)
            .map(lambda p: f"{p[0]}:{p[1]}".encode())
            .filter(_not_the_password)
            .map(lambda b: base64.b64encode(b).decode()),
            st.just(base64.b64encode(b"adm:wrong").decode()),
            st.just(base64.b64encode(b"adm:s3cret").decode() + "!"),
            st.just("=" * 5),
            st.just("YWRt" * 3000),
            header_text,
        ),
    ).map("".join),
)
cookie = st.one_of(
    header_text.map(lambda t: "AuthSession=" + t),
    header_text,
    st.tuples(
        st.sampled_from(["adm", "nobody", "", "adm:x"]),
        st.one_of(
            st.integers(0, 2**40).map(lambda i: format(i, "X")),
            st.just(format(int(time.time()), "X")),
            st.just("F" * 300),
            st.just("-1"),
            st.just("zz"),
        ),
        st.binary(min_size=0, max_size=40),
    ).map(lambda t: "AuthSession=" + forged_cookie(t[0], t[1], t[2] or SECRET.encode())),
    st.just(
        "AuthSession=" + forged_cookie("adm", format(int(time.time()) - 3600, "X"), bytes.fromhex(SECRET))
    ),  # the right key, no admin hash: still wrong
    st.just("AuthSession=" + _b64(b"adm:" + b"F" * 5000 + b":mac")),
)
PROTECTED = [
    ("GET", "/_scheduler/jobs", None),
    ("GET", "/_scheduler/docs", None),
    ("PUT", "/_replicator/x", {"handler": IDLE}),
    ("DELETE", "/_replicator/seed", None),
    ("POST", "/_replicate", {"replication_id": "x", "handler": IDLE}),
    ("PUT", "/_node/_local/_config/replicator/max_jobs", "3"),
    ("GET", "/_node/_local/_stats", None),
    ("GET", "/_node/_local/_prometheus", None),
]


@SOME
@given(auth=st.none() | authorization, cookie=st.none() | cookie, which=st.integers(0, len(PROTECTED) - 1))
def test_junk_credentials_are_401_and_change_nothing(n, auth, cookie, which) -> None:
    if auth is None and cookie is None:
        auth = "Basic"
    method, path, body = PROTECTED[which]
    headers = {k: v for k, v in (("Authorization", auth), ("Cookie", cookie)) if v is not None}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    before = n.store.snapshot()
    reply = exchange(n.http_port, request_bytes(method, path, data, headers))
    try:
        assert reply.status == 401 and is_couch_error(reply), describe(reply)
        assert reply.json()["error"] == "unauthorized"
        assert "set-cookie" not in reply.headers
        assert n.store.snapshot() == before
        assert n.s.jobs() == [] and n.s.settings() == n.settings
    finally:
        n.undo(before, n.couch_jobs if "_config" in path else None)
    n.check()


login_body = st.one_of(
    st.fixed_dictionaries({}, optional={"name": S.json_value, "username": S.json_value, "password": S.json_value}).map(
        lambda d: ("application/json", json.dumps(d).encode())
    ),
    st.dictionaries(st.sampled_from(["name", "username", "password", "x"]), S.odd_text, max_size=3).map(
        lambda d: (
            "application/x-www-form-urlencoded",
            "&".join(f"{k}={v}" for k, v in d.items()).encode("utf-8", "replace"),
        )
    ),
    st.tuples(
        st.sampled_from(
            ["application/json", "application/x-www-form-urlencoded", "", "text/plain", "multipart/form-data"]
        ),
        st.binary(max_size=60),
    ),
    st.just(("application/json", b'{"name": "adm", "password": "S3CRET"}')),
    st.just(("application/x-www-form-urlencoded", b"name=adm&password=s3cret%01")),
    st.just(("application/json", json.dumps({"name": "adm", "password": "x" * 100_000}).encode())),
)


@SOME
@given(case=login_body)
def test_junk_logins_are_refused_with_couchdb_errors(n, case) -> None:
    ctype, data = case
    before = n.store.snapshot()
    reply = exchange(n.http_port, request_bytes("POST", "/_session", data, {"Content-Type": ctype} if ctype else {}))
    assert reply.status in (400, 401, 415) and is_couch_error(reply), describe(reply)
    assert "set-cookie" not in reply.headers
    assert n.store.snapshot() == before
    n.check()


@pytest.mark.parametrize(
    "ctype, data",
    [
        ("application/x-www-form-urlencoded", b"name=adm&password=s3cret&extra=%ff%zz"),
        ("application/json", b'{"name": "adm", "password": "s3cret", "extra": [1, {"a": null}]}'),
        ("application/json; charset=utf-8", b'{"username": "adm", "password": "s3cret"}'),
    ],
)
def test_real_logins_still_work_amid_the_junk(n, ctype, data) -> None:
    reply = exchange(n.http_port, request_bytes("POST", "/_session", data, {"Content-Type": ctype}))
    assert reply.status == 200 and reply.json() == {"ok": True, "name": "adm", "roles": ["_admin"]}, describe(reply)
    token = reply.headers["set-cookie"].split(";", 1)[0]
    jobs = request(n.http_port, "GET", "/_scheduler/jobs", headers={"Cookie": f'junk=1; {token}; other="x"'})
    assert jobs.status == 200, describe(jobs)


def test_open_endpoints_stay_open_and_protected_ones_take_basic(n) -> None:
    for path in ("/", "/_up"):
        assert request(n.http_port, "GET", path, headers={"Authorization": "Basic !!!"}).status == 200
    assert request(n.http_port, "GET", "/_scheduler/jobs", headers=GOOD).status == 200
    assert request(n.http_port, "GET", "/_scheduler/jobs").status == 401
