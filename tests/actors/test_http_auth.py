"""The HTTP API with an admin configured, and the real cloudant 2.15.0 client.

One node for the module, its config file holding ``[admins] adm = s3cret``
in clear (hashed and rewritten when the node starts). The cloudant client
runs unmodified: cookie session, ``Scheduler.list_jobs/list_docs/get_doc``,
and a pagination loop over more jobs than one page.
"""

from __future__ import annotations

import base64
import importlib
import subprocess
import sys
import time

import pytest

from actors.http.auth import Auth, hash_password, load_admins, verify_password
from actors.settings.config import Config

from .http_fixtures import HttpNode, wait_until

pytestmark = pytest.mark.timeout(90)
SECRET = "ab" * 32
CONFIG = """; node config
[node]
log_level = info

[admins]
; the one admin
adm = s3cret

[replicator]
max_jobs = 20
"""


@pytest.fixture(scope="module")
def n(tmp_path_factory):
    path = tmp_path_factory.mktemp("auth") / "node.ini"
    path.write_text(CONFIG)
    config = Config()
    config.set("replicator", "max_jobs", 20)
    node = HttpNode(config, config_path=str(path), secret=SECRET)
    node.config_path = path
    try:
        yield node
    finally:
        node.stop()


def basic(name: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


def cookie_of(r) -> str:
    header = r.headers["Set-Cookie"]
    assert header.startswith("AuthSession=") and "; Version=1; Path=/; HttpOnly" in header
    return header.split(";", 1)[0]


def test_clear_password_is_hashed_in_the_file(n) -> None:
    text = n.config_path.read_text()
    assert "s3cret" not in text and "adm = -pbkdf2-" in text
    assert text.startswith("; node config\n") and "; the one admin\n" in text and "max_jobs = 20" in text
    stored = load_admins(n.config_path)["adm"]
    derived, salt, iterations = stored[len("-pbkdf2-") :].split(",")
    assert len(derived) == 40 and len(salt) == 32 and int(iterations) > 0
    assert verify_password(stored, "s3cret") and not verify_password(stored, "wrong")
    assert load_admins(n.config_path)["adm"] == stored  # stable once hashed


def test_hash_format_matches_couchdb() -> None:
    # CouchDB: -pbkdf2-<hex of PBKDF2-SHA1(password, salt, iterations, 20)>,<salt>,<iterations>
    assert (
        hash_password("pw", salt="salt", iterations=10)
        == "-pbkdf2-" + __import__("hashlib").pbkdf2_hmac("sha1", b"pw", b"salt", 10, 20).hex() + ",salt,10"
    )


def test_everything_but_welcome_and_up_needs_an_admin(n) -> None:
    assert n.request("GET", "/").status == 200
    assert n.request("GET", "/_up").status == 200
    for method, path in (
        ("GET", "/_scheduler/jobs"),
        ("GET", "/_scheduler/docs"),
        ("GET", "/_node/_local/_stats"),
        ("GET", "/_node/_local/_config/replicator/max_jobs"),
        ("POST", "/_replicate"),
        ("GET", "/_node/_local/_prometheus"),
        ("GET", "/_scheduler/jobs/x"),
    ):
        r = n.request(method, path, {} if method == "POST" else None)
        assert r.status == 401, path
        assert r.json() == {"error": "unauthorized", "reason": "You are not a server admin."}
    r = n.request("GET", "/_scheduler/jobs", headers=basic("adm", "s3cret"))
    assert r.status == 200 and r.json()["total_rows"] == 0
    r = n.request("GET", "/_scheduler/jobs", headers=basic("adm", "nope"))
    assert r.status == 401 and r.json() == {"error": "unauthorized", "reason": "Name or password is incorrect."}
    assert n.request("GET", "/_scheduler/jobs", headers=basic("who", "s3cret")).status == 401


def test_session_form_and_json_logins_set_a_cookie(n) -> None:
    form = n.request(
        "POST", "/_session", b"name=adm&password=s3cret", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert form.status == 200 and form.json() == {"ok": True, "name": "adm", "roles": ["_admin"]}
    cookie = cookie_of(form)
    assert n.request("GET", "/_scheduler/jobs", headers={"Cookie": cookie}).status == 200
    for body in ({"name": "adm", "password": "s3cret"}, {"username": "adm", "password": "s3cret"}):
        r = n.request("POST", "/_session", body)
        assert r.status == 200 and n.request("GET", "/_up", headers={"Cookie": cookie_of(r)}).status == 200
    me = n.request("GET", "/_session", headers={"Cookie": cookie}).json()
    assert me["userCtx"] == {"name": "adm", "roles": ["_admin"]} and me["info"]["authenticated"] == "cookie"
    assert n.request("GET", "/_session").json()["userCtx"] == {"name": None, "roles": []}
    for bad in ({"name": "adm", "password": "x"}, {"name": "x", "password": "s3cret"}, {"name": "adm"}):
        r = n.request("POST", "/_session", bad)
        assert r.status == 401 and r.json() == {"error": "unauthorized", "reason": "Name or password is incorrect."}
    assert n.request("POST", "/_session", b"{bad", headers={"Content-Type": "application/json"}).status == 400
    out = n.request("DELETE", "/_session", headers={"Cookie": cookie})
    assert out.status == 200 and out.json() == {"ok": True} and "Max-Age=0" in out.headers["Set-Cookie"]


def test_forged_and_expired_cookies_are_refused(n) -> None:
    admins = load_admins(n.config_path)
    old = Auth(admins, bytes.fromhex(SECRET), clock=lambda: time.time() - 601).make_cookie("adm")
    fresh = Auth(admins, bytes.fromhex(SECRET)).make_cookie("adm")
    forged = Auth(admins, b"another secret").make_cookie("adm")
    assert n.request("GET", "/_scheduler/jobs", headers={"Cookie": f"AuthSession={fresh}"}).status == 200
    for token in (old, forged, "garbage", ""):
        r = n.request("GET", "/_scheduler/jobs", headers={"Cookie": f"AuthSession={token}"})
        assert r.status == 401 and r.json()["reason"] == "You are not a server admin."
    # A session older than a tenth of the timeout is refreshed with a new cookie.
    aging = Auth(admins, bytes.fromhex(SECRET), clock=lambda: time.time() - 120).make_cookie("adm")
    r = n.request("GET", "/_scheduler/jobs", headers={"Cookie": f"AuthSession={aging}"})
    assert r.status == 200 and r.headers["Set-Cookie"].startswith("AuthSession=")


def test_replicate_records_the_user(n) -> None:
    r = n.request("POST", "/_replicate", n.handler_job("owned"), headers=basic("adm", "s3cret"))
    assert r.status == 202
    try:
        assert n.request("GET", "/_scheduler/jobs/owned", headers=basic("adm", "s3cret")).json()["user"] == "adm"
    finally:
        n.s.remove_job("owned")


# ------------------------------------------------------- the real client


@pytest.fixture(scope="module")
def cloudant():
    try:
        return importlib.import_module("cloudant")
    except ImportError:
        pass
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "cloudant==2.15.0"], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        pytest.skip(f"cloudant==2.15.0 is not installable: {done.stderr.strip()[-300:]}")
    importlib.invalidate_caches()
    return importlib.import_module("cloudant")


def test_cloudant_scheduler_client_unmodified(n, cloudant) -> None:
    from cloudant.client import CouchDB
    from cloudant.scheduler import Scheduler
    from requests.exceptions import HTTPError

    ids = [f"job{i:02d}" for i in range(7)]
    for job_id in ids:
        n.s.add_job(n.handler_job(job_id))
    try:
        client = CouchDB("adm", "s3cret", url=n.url, connect=True)
        try:
            scheduler = Scheduler(client)
            first = scheduler.list_jobs(limit=3, skip=1)
            assert first["total_rows"] == 7 and first["offset"] == 1
            assert [j["id"] for j in first["jobs"]] == ids[1:4]
            entry = first["jobs"][0]  # the fields the client's document shows, typed as it says
            assert isinstance(entry["continuous"], bool) and isinstance(entry["checkpointed_source_seq"], str)
            assert isinstance(entry["source_seq"], str)
            assert all(
                isinstance(entry[k], int)
                for k in (
                    "revisions_checked",
                    "missing_revisions_found",
                    "docs_read",
                    "docs_written",
                    "doc_write_failures",
                    "bulk_get_docs",
                    "bulk_get_attempts",
                )
            )

            seen, skip, limit = [], 0, 3  # the pagination loop of the client's docs
            while True:
                page = scheduler.list_jobs(limit=limit, skip=skip)
                if not page["jobs"]:
                    break
                seen += [j["id"] for j in page["jobs"]]
                skip += limit
                if skip >= page["total_rows"]:
                    break
            assert seen == ids

            assert scheduler.list_docs() == {"total_rows": 0, "offset": 0, "docs": []}
            assert scheduler.list_docs(limit=2, skip=1)["docs"] == []
            with pytest.raises(HTTPError) as err:
                scheduler.get_doc("some_doc")
            assert err.value.response.status_code == 404 and "not_found missing" in str(err.value)
            with pytest.raises(HTTPError) as err:
                scheduler.list_jobs(limit=-1)
            assert err.value.response.status_code == 400 and "query_parse_error" in str(err.value)
        finally:
            client.disconnect()

        anonymous = CouchDB(None, None, url=n.url, admin_party=True, connect=True)
        with pytest.raises(HTTPError) as err:
            Scheduler(anonymous).list_jobs()
        assert err.value.response.status_code == 401 and "You are not a server admin." in str(err.value)
        anonymous.disconnect()

        wrong = CouchDB("adm", "wrong", url=n.url, connect=False)
        with pytest.raises(HTTPError) as err:
            wrong.connect()
        assert err.value.response.status_code == 401

        basic_client = CouchDB("adm", "s3cret", url=n.url + "/", use_basic_auth=True, connect=True)
        assert Scheduler(basic_client).list_jobs(limit=2)["total_rows"] == 7
        basic_client.disconnect()
    finally:
        for job_id in ids:
            n.s.remove_job(job_id)
    wait_until(lambda: n.s.jobs() == [], what="jobs removed")
