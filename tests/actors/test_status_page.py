"""The read-only status page at ``/_utils/``, on real nodes over loopback.

Job ids, crash reasons, document ids and URLs are user data: the jobs and
documents here carry markup (a ``<script>`` that would change the page's
title, an ``<img onerror>``), and the page must show them as text. Checked
twice: on the bytes (requests) and in a real headless browser (Debian's
chromium, which ``.ci/run`` installs), whose rendered DOM must show the ids
and states and no script element, with the title untouched.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import time
from urllib.parse import quote

import pytest
import requests

import fdblayer
from actors import jobs
from actors.node.config import Config
from actors.node.root import ROOT_FLAGS, root_children
from actors.scheduler.client import SchedulerClient
from supervision import start_node

from .http_fixtures import HttpNode, free_port, group_pids, wait_until

pytestmark = pytest.mark.timeout(120)

CHROMIUM = "/usr/bin/chromium"
INJECTED = '<script>document.title="pwned"</script>'
INJECTED_TEXT = "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;"
CRASH_REASON = '<img src=x onerror="document.title=\'pwned\'">'
DOC_ID = "doc<b>bold</b>&co"
TITLE = "<title>otpjobs status</title>"
#: The queue type a pool of the node serves with :func:`queue_handler`.
QTYPE = "mail"


def queue_handler(ctx) -> None:
    """A pool's handler: fails with markup in its error, or holds its job with markup in its progress."""
    if ctx.data.get("mode") == "fail":
        raise ValueError(CRASH_REASON)
    ctx.progress(step=INJECTED)
    deadline = time.monotonic() + 120
    while not ctx.stopping and time.monotonic() < deadline:
        time.sleep(0.05)


def crash_with_markup(ctx) -> None:
    """A job handler (run in the job's process) that crashes with markup in its reason."""
    raise RuntimeError(ctx.options["reason"])


class FullNode(HttpNode):
    """HttpNode's helpers on a whole node (queue, scheduler, doc processor, HTTP)."""

    def __init__(self, store_dir: str) -> None:  # noqa: D107 - HttpNode's, with root_children
        config = Config()
        self.port = free_port()
        for key, value in (("port", self.port), ("http_port", 0),  # 0: any free port, no race
                           ("store", f"sqlite:///{store_dir}/store.db")):
            config.set("node", key, value)
        # The job policy: the test handlers, and the http:// labels the jobs carry.
        config.set("replicator", "handlers", "tests.actors.scheduler_fixtures, tests.actors.test_status_page")
        config.set("replicator", "stores", "http://")
        config.workers[QTYPE] = f"{__name__}:queue_handler"
        self.store_url = f"sqlite:///{store_dir}/store.db"
        self.secret = None
        self.node = start_node(self.port, ROOT_FLAGS, root_children(config))
        self.client = self.node.client()
        self.s = SchedulerClient(self.client)
        self.http_port = self.http_info()["port"]
        self.url = f"http://127.0.0.1:{self.http_port}"


@pytest.fixture(scope="module")
def n(tmp_path_factory):
    """Transient jobs (one with markup in its id) and permanent ones (one with
    markup in its doc id, crashing with markup in its reason)."""
    node = FullNode(str(tmp_path_factory.mktemp("statuspage")))
    try:
        for job_id, extra in ((INJECTED, {"source": "http://adm:secret@example.com/db",
                                          "target": "http://example.com/<i>t</i>"}),
                              ("plain-job", {})):
            assert node.request("POST", "/_replicate", node.handler_job(job_id, **extra)).status == 202
        for doc_id, body in ((DOC_ID, {"handler": f"{__name__}:crash_with_markup", "continuous": True,
                                       "options": {"reason": CRASH_REASON}}),
                             ("doc-2", node.handler_job("doc-2", source="http://u:pw@example.com/a",
                                                        target="http://example.com/b"))):
            body.pop("id", None)
            r = node.request("PUT", f"/_replicator/{quote(doc_id, safe='')}", body)
            assert r.status == 201, r.body
        db = fdblayer.open(node.store_url)
        jobs.set_type_timeout(db, QTYPE, 30)
        jobs.enqueue(db, QTYPE, {"mode": "hold"}, id=INJECTED)
        jobs.enqueue(db, QTYPE, {"mode": "fail"}, id="failing", max_attempts=1)
        jobs.enqueue(db, QTYPE, {"note": INJECTED}, id="later", delay=1800)  # shown "in 30 min"
        wait_until(lambda: [(t["running"], t["failed"]) for t in node.request("GET", "/_jobs").json()["types"]
                            if t["type"] == QTYPE] == [(1, 1)], 60, "a queue job running and one failed")
        wait_until(lambda: node.request("GET", f"/_jobs/{QTYPE}?state=running").json()["jobs"][0]["progress"],
                   30, "the running job's progress")
        db.close()
        wait_until(lambda: sum(j["pid"] not in (None, "<starting>") for j in node.s.jobs()) >= 3
                   and [d["state"] for d in node.request("GET", "/_scheduler/docs").json()["docs"]]
                   == ["running", "crashing"], 60, "three jobs running and one document crashing")
        yield node
    finally:
        node.stop()


def page(n, path: str = "/_utils/", **kw) -> requests.Response:
    return requests.get(n.url + path, timeout=30, allow_redirects=False, **kw)


# ------------------------------------------------------------ plain HTTP


def test_page_lists_jobs_and_docs_with_states_and_history(n) -> None:
    r = page(n)
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/html; charset=utf-8"
    text = r.text
    assert text.startswith("<!DOCTYPE html>") and TITLE in text
    assert f'<code id="node">otpjobs-{n.port}@' in text
    assert "<code>plain-job</code>" in text and "<code>doc-2</code>" in text and "_replicator/doc-2" in text
    rows = {re.search(r'<td class="id"><code>(.*?)</code>', row).group(1): re.search(r'class="state (\w+)"', row)
            .group(1) for row in re.findall(r"<tr class=\"(?:job|doc)\">.*?</tr>", text)}
    assert rows["plain-job"] == rows["doc-2"] == rows[INJECTED_TEXT] == "running"
    assert rows["doc&lt;b&gt;bold&lt;/b&gt;&amp;co"] == "crashing"  # the document (backoff: it stays so)
    assert "<time>" in text and " added</li>" in text and " started</li>" in text and " crashed: " in text
    assert '<span id="jobs-total">4</span>' in text and '<span id="docs-total">2</span>' in text


def test_page_shows_the_queue_types_running_jobs_failures_and_delayed_jobs(n) -> None:
    text = page(n).text
    section = re.search(r'<section id="queues">.*?</section>', text).group(0)
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r'<tr class="queue-type">(.*?)</tr>', section)]
    assert [QTYPE, "30.0", "1", "1", "0", "1", "1", "1"] in rows  # claimed 0: the held job's handler runs
    running = re.search(r'<table id="running-table">.*?</table>', section).group(0)
    assert f"<code>{INJECTED_TEXT}</code>" in running and "<td>1</td>" in running
    assert INJECTED_TEXT.replace("&quot;", "\\&quot;") in running  # the progress record, escaped as JSON text
    failures = re.search(r'<table id="failures-table">.*?</table>', section).group(0)
    assert "<code>failing</code>" in failures and "<code>ValueError</code>: " in failures
    assert "&lt;img src=x onerror=" in failures and " ago</time>" in failures
    delayed = re.search(r'<table id="delayed-table">.*?</table>', section).group(0)
    assert "<code>later</code>" in delayed and ">in 30 min</time>" in delayed
    assert section.index("running-table") < section.index("failures-table") < section.index("delayed-table")


def test_every_value_is_escaped(n) -> None:
    text = page(n).text
    assert text.lower().count("<script") == 0 and "<img" not in text and "<b>" not in text and "<i>" not in text
    assert INJECTED_TEXT in text                                    # the job id, as text
    assert "&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;" in text  # the crash reason
    assert "doc&lt;b&gt;bold&lt;/b&gt;&amp;co" in text                 # the doc id
    assert "http://example.com/&lt;i&gt;t&lt;/i&gt;" in text
    assert "http://adm:*****@example.com/db" in text and "secret" not in text and ":pw@" not in text


def test_the_page_allows_no_script(n) -> None:
    r = page(n)
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "unsafe-inline" not in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["X-Frame-Options"] == "DENY"


def test_index_html_redirect_head_paging_and_errors(n) -> None:
    assert page(n, "/_utils/index.html").text.count("plain-job") == page(n).text.count("plain-job") == 1
    r = page(n, "/_utils")
    assert r.status_code == 301 and r.headers["Location"] == "/_utils/"  # as CouchDB
    head = requests.head(n.url + "/_utils/", timeout=30)
    assert head.status_code == 200 and head.content == b""
    one = page(n, "/_utils/?limit=1&skip=1").text
    assert one.count('<tr class="job">') == 1 and one.count('<tr class="doc">') == 1
    assert "next &#8594;" in one and "&#8592; previous" in one
    bad = page(n, "/_utils/?limit=-1")
    assert bad.status_code == 400 and bad.json()["error"] == "query_parse_error"
    assert page(n, "/_utils/elsewhere.html").status_code == 404
    assert requests.post(n.url + "/_utils/", timeout=30).status_code == 405


def test_same_authentication_as_the_api(tmp_path) -> None:
    path = tmp_path / "node.ini"
    path.write_text("[admins]\nadm = s3cret\n")
    node = HttpNode(Config(), config_path=str(path))
    try:
        r = page(node)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        assert r.headers["WWW-Authenticate"].startswith("Basic ")  # a browser asks for credentials
        assert page(node, auth=("adm", "wrong")).status_code == 401
        assert page(node, auth=("adm", "s3cret")).status_code == 200
        login = requests.post(node.url + "/_session", data={"name": "adm", "password": "s3cret"}, timeout=30)
        cookie = login.headers["Set-Cookie"].split(";", 1)[0]
        assert page(node, headers={"Cookie": cookie}).status_code == 200
        assert page(node, "/_utils/index.html").status_code == 401
    finally:
        node.stop()


# ------------------------------------------------------ a real browser


def dump_dom(url: str, tmp_path) -> str:
    """The DOM chromium renders for ``url`` (headless); its processes are all gone afterwards."""
    profile = tmp_path / f"chromium-{base64.urlsafe_b64encode(os.urandom(6)).decode()}"
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--dump-dom", url]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        wait_until(lambda: not group_pids(proc.pid), 10, "no chromium process left")
    assert proc.returncode == 0 or out, f"chromium exited with {proc.returncode}"
    return out.decode()


@pytest.mark.skipif(not os.path.exists(CHROMIUM) or not shutil.which(CHROMIUM),
                    reason="Debian's chromium is not installed (.ci/run installs it)")
def test_headless_chromium_renders_the_page_and_runs_no_injected_script(n, tmp_path) -> None:
    # the control: this browser, so started, does run a page's scripts
    control = dump_dom('data:text/html,<title>t</title><script>document.title="ran"</script>', tmp_path)
    assert "<title>ran</title>" in control

    dom = dump_dom(n.url + "/_utils/", tmp_path)
    assert TITLE in dom and "pwned</title>" not in dom            # neither injection ran
    assert "<script" not in dom.lower() and "<img" not in dom     # nor became an element
    assert INJECTED_TEXT.replace("&quot;", '"') in dom            # the id is shown as text
    assert "doc&lt;b&gt;bold&lt;/b&gt;&amp;co" in dom
    for shown in ("plain-job", "doc-2"):
        assert f"<code>{shown}</code>" in dom
    for state in ("running", "crashing"):
        assert f">{state}</td>" in dom
    for table in ("types-table", "running-table", "failures-table", "delayed-table"):
        assert f'<table id="{table}">' in dom
    assert "<code>failing</code>" in dom and "<code>later</code>" in dom
