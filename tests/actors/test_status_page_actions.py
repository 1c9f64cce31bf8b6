"""The status page's buttons: retry and cancel on a job's page, in a real browser and over HTTP.

A job's page (``/_utils/jobs/{type}/{id}``) posts its forms to the same
origin with a CSRF token; a post without the token, with a wrong, expired
or another admin's token, or one a browser says comes from another site, is
a 403 that changes nothing. In headless chromium (driven over the DevTools
pipe, :mod:`tests.actors.browser`; no script runs in the page) a test follows
a job's link from the status page, clicks Retry and sees the job run again,
and clicks Cancel on a running job and sees it gone.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from urllib.parse import quote

import pytest
import requests

import fdblayer
from actors import jobs
from actors.http.auth import CSRF_TTL, Auth, load_admins

from .browser import CHROMIUM, Browser
from .http_fixtures import wait_until
from .test_status_page import QTYPE, FullNode

pytestmark = pytest.mark.timeout(180)

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) or not shutil.which(CHROMIUM),
    reason="Debian's chromium is not installed (.ci/run installs it)",
)
SECRET = "5e" * 32
ADMINS = {"adm": "s3cret", "other": "pw2"}
ADMINS_AUTH = {name: (name, password) for name, password in ADMINS.items()}


def add_jobs(url: str, marker_dir: str) -> None:
    """Per node: a job that fails once then succeeds (``retry-me``), one held running
    (``hold-me``) and one due in half an hour (``later-1``, ``later-2``)."""
    db = fdblayer.open(url)
    try:
        jobs.set_type_timeout(db, QTYPE, 30)
        jobs.enqueue(
            db,
            QTYPE,
            {"mode": "fail_once", "marker": os.path.join(marker_dir, "retry-me")},
            id="retry-me",
            max_attempts=1,
            priority=3,
        )
        jobs.enqueue(db, QTYPE, {"mode": "hold"}, id="hold-me")
        for job_id in ("later-1", "later-2"):
            jobs.enqueue(db, QTYPE, {"note": job_id}, id=job_id, delay=1800)
    finally:
        db.close()


def view(n: FullNode, job_id: str, auth=None) -> requests.Response:
    return requests.get(f"{n.url}/_jobs/{QTYPE}/{quote(job_id, safe='')}", auth=auth, timeout=30)


def wait_ready(n: FullNode, auth=None) -> None:
    wait_until(lambda: view(n, "retry-me", auth).json().get("outcome") == "failed", 60, "retry-me failed once")
    wait_until(lambda: view(n, "hold-me", auth).json().get("state") == "running", 60, "hold-me running")


@pytest.fixture(scope="module")
def n(tmp_path_factory):
    """A node with no admin (admin party: loopback only)."""
    directory = tmp_path_factory.mktemp("actions")
    node = FullNode(str(directory))
    try:
        add_jobs(node.store_url, str(directory))
        wait_ready(node)
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def a(tmp_path_factory):
    """A node with two admins and a known session secret."""
    directory = tmp_path_factory.mktemp("actions-auth")
    path = directory / "node.ini"
    path.write_text("[admins]\n" + "".join(f"{k} = {v}\n" for k, v in ADMINS.items()))
    node = FullNode(str(directory), config_path=str(path), secret=SECRET)
    node.ini = path
    try:
        add_jobs(node.store_url, str(directory))
        wait_ready(node, ADMINS_AUTH["adm"])
        yield node
    finally:
        node.stop()


def job_page(n: FullNode, job_id: str, **kw) -> requests.Response:
    return requests.get(f"{n.url}/_utils/jobs/{QTYPE}/{quote(job_id, safe='')}", timeout=30, **kw)


def token_of(text: str) -> str:
    return re.search(r'<input type="hidden" name="csrf" value="([^"]+)">', text).group(1)


def post(n: FullNode, job_id: str, action: str, fields: dict | None, **kw) -> requests.Response:
    return requests.post(
        f"{n.url}/_utils/jobs/{QTYPE}/{quote(job_id, safe='')}/{action}",
        data=fields,
        allow_redirects=False,
        timeout=30,
        **kw,
    )


def assert_refused(r: requests.Response, status: int = 403) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"] == "application/json"
    assert r.json()["error"] == {401: "unauthorized", 403: "forbidden", 404: "not_found"}[status]


# ------------------------------------------------------------ over HTTP


def test_a_post_without_the_pages_token_is_refused_and_changes_nothing(n) -> None:
    before = view(n, "later-1").json()
    token = token_of(job_page(n, "later-1").text)
    refused = [
        post(n, "later-1", "_cancel", None),  # no form at all
        post(n, "later-1", "_cancel", {"was": "unfinished"}),  # no token
        post(n, "later-1", "_cancel", {"csrf": "", "was": "unfinished"}),
        post(n, "later-1", "_cancel", {"csrf": token[:-9] + ("A" if token[-9] != "A" else "B") + token[-8:]}),
        post(n, "later-1", "_cancel", {"csrf": token[:-1] + ("A" if token[-1] != "A" else "B")}),  # same bytes
        post(n, "later-1", "_cancel", {"csrf": "0." + token.split(".")[1]}),  # another time
        post(
            n,
            "later-1",
            "_cancel",
            {"csrf": token, "was": "unfinished"},  # from another site
            headers={"Sec-Fetch-Site": "cross-site"},
        ),
        post(n, "later-1", "_cancel", {"csrf": token}, headers={"Sec-Fetch-Site": "same-site"}),
        requests.post(
            f"{n.url}/_utils/jobs/{QTYPE}/later-1/_cancel",
            json={"csrf": token},  # not a form
            allow_redirects=False,
            timeout=30,
        ),
        post(n, "retry-me", "_retry", {"csrf": "x"}),
    ]
    for r in refused:
        assert_refused(r)
    assert view(n, "later-1").json() == before
    assert view(n, "retry-me").json()["outcome"] == "failed"
    # the page's token, as the page's form sends it
    r = post(n, "later-1", "_cancel", {"csrf": token, "was": "unfinished"}, headers={"Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 303 and r.headers["Location"] == f"/_utils/jobs/{QTYPE}/later-1?done=cancelled"
    assert view(n, "later-1").status_code == 404
    assert_refused(post(n, "later-1", "_cancel", {"csrf": token}), 404)  # nothing left to cancel
    assert requests.get(n.url + r.headers["Location"], timeout=30).status_code == 404


def test_retry_refuses_an_unfinished_job_and_cancel_a_job_finished_since(n) -> None:
    token = token_of(job_page(n, "hold-me").text)
    r = post(n, "hold-me", "_retry", {"csrf": token})
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    assert view(n, "hold-me").json()["state"] == "running"
    # a cancel posted from the page of a job not finished yet, when the job has finished since
    r = post(n, "retry-me", "_cancel", {"csrf": token, "was": "unfinished"})
    assert r.status_code == 409 and "finished before it was cancelled" in r.json()["reason"]
    assert view(n, "retry-me").status_code == 200


@pytest.mark.slow
def test_with_admins_the_token_is_bound_to_the_admin_and_expires(a) -> None:
    adm, other = ADMINS_AUTH["adm"], ADMINS_AUTH["other"]
    assert job_page(a, "later-1").status_code == 401
    page = job_page(a, "later-1", auth=adm)
    assert page.status_code == 200 and "form-action 'self'" in page.headers["Content-Security-Policy"]
    token = token_of(page.text)
    before = view(a, "later-1", adm).json()
    hashes = load_admins(a.ini, rewrite=False)
    expired = Auth(hashes, bytes.fromhex(SECRET), clock=lambda: time.time() - CSRF_TTL - 5).csrf_token("adm")
    assert Auth(hashes, bytes.fromhex(SECRET)).check_csrf(token, "adm")  # what the node made, as the test makes it
    assert_refused(post(a, "later-1", "_cancel", {"csrf": token}), 401)  # no credentials
    assert_refused(post(a, "later-1", "_cancel", {"csrf": token}, auth=("adm", "wrong")), 401)
    assert_refused(post(a, "later-1", "_cancel", {}, auth=adm))  # no token
    assert_refused(post(a, "later-1", "_cancel", {"csrf": token}, auth=other))  # another admin's
    assert_refused(post(a, "later-1", "_cancel", {"csrf": expired}, auth=adm))  # too old
    no_admin = Auth({}, bytes.fromhex(SECRET)).csrf_token(None)
    assert_refused(post(a, "later-1", "_cancel", {"csrf": no_admin}, auth=adm))  # an admin party's
    assert view(a, "later-1", adm).json() == before
    r = post(a, "later-1", "_cancel", {"csrf": token, "was": "unfinished"}, auth=adm)
    assert r.status_code == 303 and view(a, "later-1", adm).status_code == 404
    # a session: the token of the page read with the cookie, posted with the cookie
    login = requests.post(a.url + "/_session", data={"name": "other", "password": "pw2"}, timeout=30)
    cookie = {"Cookie": login.headers["Set-Cookie"].split(";", 1)[0]}
    token = token_of(job_page(a, "retry-me", headers=cookie).text)
    assert_refused(post(a, "retry-me", "_retry", {"csrf": token}, auth=adm))  # other's token
    r = post(a, "retry-me", "_retry", {"csrf": token}, headers=cookie)
    assert r.status_code == 303 and r.headers["Location"] == f"/_utils/jobs/{QTYPE}/retry-me?done=retried"
    wait_until(lambda: view(a, "retry-me", adm).json().get("outcome") == "succeeded", 60, "retry-me succeeded")
    assert view(a, "retry-me", adm).json()["priority"] == 3  # kept by the page's retry


def test_the_forms_carry_the_token_and_the_actions_are_post_only(n) -> None:
    text = job_page(n, "later-2").text
    forms = re.findall(r'<form method="post" action="([^"]+)">(.*?)</form>', text)
    assert [action for action, _ in forms] == [f"/_utils/jobs/{QTYPE}/later-2/_cancel"]
    assert all(f'name="csrf" value="{token_of(text)}"' in body for _, body in forms)
    for method in ("GET", "PUT", "DELETE"):
        r = requests.request(method, f"{n.url}/_utils/jobs/{QTYPE}/later-2/_cancel", timeout=30)
        assert r.status_code == 405 and r.headers["Allow"] == "POST"
    assert view(n, "later-2").status_code == 200


# ------------------------------------------------------ in a real browser


@pytest.mark.slow
@needs_chromium
def test_in_chromium_retry_runs_a_failed_job_again(n, tmp_path) -> None:
    with Browser(str(tmp_path / "profile")) as browser:
        status = browser.open(n.url + "/_utils/")
        assert f'href="/_utils/jobs/{QTYPE}/retry-me"' in status
        page = browser.click(f'#failures-table a[href="/_utils/jobs/{QTYPE}/retry-me"]')  # the link, clicked
        assert '<span class="state failed" id="job-state">finished (failed)</span>' in page
        assert "<code>ValueError</code>" in page and "<script" not in page.lower()
        after = browser.click("button.retry")
        assert browser.url() == f"{n.url}/_utils/jobs/{QTYPE}/retry-me?done=retried"  # after the 303
        assert 'id="notice">Retried' in after and "finished (failed)" not in after
        # the job ran again: this time it succeeds (its marker is there), as the page shows on reload
        wait_until(
            lambda: "finished (succeeded)" in browser.open(f"{n.url}/_utils/jobs/{QTYPE}/retry-me"),
            60,
            "the page shows the job succeeded",
        )
    assert view(n, "retry-me").json()["outcome"] == "succeeded"


@pytest.mark.slow
@needs_chromium
def test_in_chromium_cancel_stops_and_removes_a_running_job(n, tmp_path) -> None:
    with Browser(str(tmp_path / "profile")) as browser:
        page = browser.open(f"{n.url}/_utils/jobs/{QTYPE}/hold-me")
        assert '<span class="state running" id="job-state">running</span>' in page
        after = browser.click("button.cancel")
        assert 'id="notice">Cancelled' in after and "<h1>No job <code>hold-me</code></h1>" in after
    assert view(n, "hold-me").status_code == 404
    wait_until(
        lambda: all(
            r["id"] != "hold-me"
            for h in requests.get(n.url + "/_workers", timeout=30).json()["hosts"]
            for r in h["running"]
        ),
        30,
        "the handler stopped",
    )
