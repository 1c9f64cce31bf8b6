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
from actors.http.server import http_children
from actors.settings.config import Config
from actors.node.root import ROOT_FLAGS, root_children
from actors.scheduler.client import SchedulerClient
from fdblayer.jobs.hosts import BEAT
from supervision import start_node

from .http_fixtures import HttpNode, free_port, group_pids, wait_until

pytestmark = pytest.mark.timeout(120)

CHROMIUM = "/usr/bin/chromium"
INJECTED = '<script>document.title="pwned"</script>'
INJECTED_TEXT = "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;"
CRASH_REASON = "<img src=x onerror=\"document.title='pwned'\">"
DOC_ID = "doc<b>bold</b>&co"
TITLE = "<title>otpjobs status</title>"
#: The queue type a pool of the node serves with :func:`queue_handler`.
QTYPE = "mail"
#: Seconds between two readings of the queue's counters (the charts' points) on the test nodes.
SAMPLE_INTERVAL = 0.25


def queue_handler(ctx) -> dict | None:
    """A pool's handler: fails with markup in its error (``fail``; ``fail_once``: the first time
    only, its ``marker`` file then written), succeeds at once (``quick``), or holds its job
    with markup in its progress until stopped."""
    mode = ctx.data.get("mode")
    if mode == "fail":
        raise ValueError(CRASH_REASON)
    if mode == "fail_once" and not os.path.exists(ctx.data["marker"]):
        with open(ctx.data["marker"], "w"):
            pass
        raise ValueError(CRASH_REASON)
    if mode in ("quick", "fail_once"):
        return {"done": INJECTED}
    ctx.progress(step=INJECTED)
    deadline = time.monotonic() + 120
    while not ctx.stopping and time.monotonic() < deadline:
        time.sleep(0.05)


def crash_with_markup(ctx) -> None:
    """A job handler (run in the job's process) that crashes with markup in its reason."""
    raise RuntimeError(ctx.options["reason"])


class FullNode(HttpNode):
    """HttpNode's helpers on a whole node (queue, scheduler, doc processor, HTTP, a worker pool
    serving :data:`QTYPE`), its listener reading the queue's counters every ``sample_interval``
    seconds, with the admins of ``config_path`` (none: admin party) and the session ``secret``."""

    def __init__(
        self,
        store_dir: str,
        config_path: str | None = None,
        secret: str | None = None,
        sample_interval: float = SAMPLE_INTERVAL,
    ) -> None:  # noqa: D107 - HttpNode's, with root_children
        config = Config()
        self.port = free_port()
        for key, value in (
            ("port", self.port),
            ("http_port", 0),  # 0: any free port, no race
            ("store", f"sqlite:///{store_dir}/store.db"),
        ):
            config.set("node", key, value)
        # The job policy: the test handlers, and the http:// labels the jobs carry.
        config.set("replicator", "handlers", "tests.actors.scheduler_fixtures, tests.actors.test_status_page")
        config.set("replicator", "stores", "http://")
        config.workers[QTYPE] = f"{__name__}:queue_handler"
        self.store_url = f"sqlite:///{store_dir}/store.db"
        self.secret = secret
        listener = http_children(config, config_path=config_path, secret=secret, sample_interval=sample_interval)
        specs = [listener[0] if spec.id == "http_server" else spec for spec in root_children(config)]
        self.node = start_node(self.port, ROOT_FLAGS, specs)
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
        for job_id, extra in (
            (INJECTED, {"source": "http://adm:secret@example.com/db", "target": "http://example.com/<i>t</i>"}),
            ("plain-job", {}),
        ):
            assert node.request("POST", "/_replicate", node.handler_job(job_id, **extra)).status == 202
        for doc_id, body in (
            (
                DOC_ID,
                {"handler": f"{__name__}:crash_with_markup", "continuous": True, "options": {"reason": CRASH_REASON}},
            ),
            ("doc-2", node.handler_job("doc-2", source="http://u:pw@example.com/a", target="http://example.com/b")),
        ):
            body.pop("id", None)
            r = node.request("PUT", f"/_replicator/{quote(doc_id, safe='')}", body)
            assert r.status == 201, r.body
        db = fdblayer.open(node.store_url)
        jobs.set_type_timeout(db, QTYPE, 30)
        jobs.enqueue(db, QTYPE, {"mode": "hold"}, id=INJECTED)
        jobs.enqueue(db, QTYPE, {"mode": "fail"}, id="failing", max_attempts=1)
        jobs.enqueue(db, QTYPE, {"note": INJECTED}, id="later", delay=1800)  # shown "in 30 min"
        wait_until(
            lambda: (
                [
                    (t["running"], t["failed"])
                    for t in node.request("GET", "/_jobs").json()["types"]
                    if t["type"] == QTYPE
                ]
                == [(1, 1)]
            ),
            60,
            "a queue job running and one failed",
        )
        wait_until(
            lambda: node.request("GET", f"/_jobs/{QTYPE}?state=running").json()["jobs"][0]["progress"],
            30,
            "the running job's progress",
        )
        db.close()
        wait_until(
            lambda: (
                sum(j["pid"] not in (None, "<starting>") for j in node.s.jobs()) >= 3
                and [d["state"] for d in node.request("GET", "/_scheduler/docs").json()["docs"]]
                == ["running", "crashing"]
            ),
            60,
            "three jobs running and one document crashing",
        )
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
    rows = {
        re.search(r'<td class="id"><code>(.*?)</code>', row).group(1): re.search(r'class="state (\w+)"', row).group(1)
        for row in re.findall(r"<tr class=\"(?:job|doc)\">.*?</tr>", text)
    }
    assert rows["plain-job"] == rows["doc-2"] == rows[INJECTED_TEXT] == "running"
    assert rows["doc&lt;b&gt;bold&lt;/b&gt;&amp;co"] == "crashing"  # the document (backoff: it stays so)
    assert "<time>" in text and " added</li>" in text and " started</li>" in text and " crashed: " in text
    assert '<span id="jobs-total">4</span>' in text and '<span id="docs-total">2</span>' in text


def test_page_shows_the_queue_types_running_jobs_failures_and_delayed_jobs(n) -> None:
    text = page(n).text
    section = re.search(r'<section id="queues">.*?</section>', text).group(0)
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r'<tr class="queue-type">(.*?)</tr>', section)]
    assert [QTYPE, "30.0", "1", "1", "0", "1", "1", "1", ""] in rows  # claimed 0: the held job's handler runs
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
    assert INJECTED_TEXT in text  # the job id, as text
    assert "&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;" in text  # the crash reason
    assert "doc&lt;b&gt;bold&lt;/b&gt;&amp;co" in text  # the doc id
    assert "http://example.com/&lt;i&gt;t&lt;/i&gt;" in text
    assert "http://adm:*****@example.com/db" in text and "secret" not in text and ":pw@" not in text


def test_the_page_allows_no_script(n) -> None:
    r = page(n)
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "unsafe-inline" not in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff" and r.headers["X-Frame-Options"] == "DENY"


def _chart(text: str, job_type: str) -> dict:
    """The chart of ``job_type`` on the page: its totals and each polyline's points."""
    section = re.search(r'<section id="throughput">.*?</section>', text).group(0)
    for figure in re.findall(r'<figure class="type-chart">.*?</figure>', section):
        if f"<figcaption><code>{job_type}</code>" in figure:
            totals = {k: int(v) for k, v in re.findall(r'<span class="total-(\w+)">(\d+)</span>', figure)}
            lines = {
                css: [tuple(map(float, p.split(","))) for p in points.split()]
                for css, points in re.findall(r'<polyline class="(\w+)"[^>]* points="([^"]*)"/>', figure)
            }
            svg = re.search(r"<svg [^>]*>", figure).group(0)
            return {"totals": totals, "lines": lines, "svg": svg, "figure": figure}
    raise AssertionError(f"no chart of {job_type!r} in {section[:3000]}")


def _samples(text: str) -> int:
    return int(re.search(r'<span id="samples">(\d+)</span>', text).group(1))


@pytest.mark.slow
def test_the_charts_count_the_jobs_that_succeed_and_fail_per_reading(n) -> None:
    # a difference needs a reading before the jobs finish: wait for one that knows the type (a node
    # just started may have read the store before the fixture's jobs declared it)
    wait_until(lambda: _chart(page(n).text, QTYPE), 10, "a reading of the type", ignore=(AssertionError,))
    start = _samples(page(n).text)
    db = fdblayer.open(n.store_url)
    try:
        for i in range(3):
            jobs.enqueue(db, QTYPE, {"mode": "quick"}, id=f"quick-{i}")
        jobs.enqueue(db, QTYPE, {"mode": "fail"}, id="fails-again", max_attempts=1)
    finally:
        db.close()
    # within the chart's window (60 readings), the differences add up to what finished since the first reading
    wait_until(lambda: _chart(page(n).text, QTYPE)["totals"].get("succeeded") == 3, 10, "three successes charted")
    chart = _chart(page(n).text, QTYPE)
    assert chart["totals"]["failed"] >= 1  # this failure (and the fixture's, if read before it)
    assert _samples(page(n).text) > start
    assert 'viewBox="0 0 ' in chart["svg"] and 'role="img"' in chart["svg"]
    # once more than 61 readings were taken of the type, exactly 60 differences are drawn, the newest at the right
    wait_until(lambda: _samples(page(n).text) >= start + 62, 60, "62 more readings")
    chart = _chart(page(n).text, QTYPE)
    assert 'data-points="60"' in chart["svg"]
    for css in ("succeeded", "failed"):
        xs = [x for x, _ in chart["lines"][css]]
        assert len(xs) == 60 and xs == sorted(xs) and xs[-1] > xs[0]
    assert chart["totals"]["succeeded"] == 0  # the quick jobs finished more than 60 readings ago
    assert "<h2>Jobs finished per 0.25 s, last 15 s</h2>" in page(n).text


def test_the_hosts_section_lists_the_running_host(n) -> None:
    # The held job shows from the host's first heartbeat after it started
    # (every BEAT seconds): waited for here, not left to the tests before.
    wait_until(
        lambda: any(h["busy"] >= 1 for h in n.request("GET", "/_workers").json()["hosts"]),
        3 * BEAT + 30,
        "a heartbeat of the host with its running job",
    )
    workers = n.request("GET", "/_workers").json()["hosts"]
    assert len(workers) == 1
    section = re.search(r'<section id="hosts">.*?</section>', page(n).text).group(0)
    rows = re.findall(r'<tr class="host">(.*?)</tr>', section)
    assert len(rows) == 1
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rows[0])
    assert cells[0] == f"<code>{workers[0]['host']}</code>" and cells[1] == f"<code>{QTYPE}</code>"
    assert cells[2] == "4" and int(cells[3]) >= 1 and cells[4].isdigit()  # concurrency, busy, claimed
    held = f'<a href="/_utils/jobs/{QTYPE}/{quote(INJECTED, safe="")}"><code>{INJECTED_TEXT}</code></a>'
    assert held in cells[5]  # the running job, linked
    assert cells[6].endswith(" ago</time>") and cells[7] == "alive"


def test_every_queue_job_links_to_its_page(n) -> None:
    section = re.search(r'<section id="queues">.*?</section>', page(n).text).group(0)
    for table, job_id in (("running", INJECTED), ("failures", "failing"), ("delayed", "later")):
        rows = re.search(rf'<table id="{table}-table">.*?</table>', section).group(0)
        ids = re.findall(r'<td class="id">(.*?)</td>', rows)
        assert ids and all(cell.startswith('<a href="/_utils/jobs/') for cell in ids), rows
        link = f"/_utils/jobs/{QTYPE}/{quote(job_id, safe='')}"
        assert f'<a href="{link}">' in rows
        assert page(n, link).status_code == 200


def test_the_job_page_shows_data_state_attempts_errors_and_times(n) -> None:
    r = page(n, f"/_utils/jobs/{QTYPE}/failing")
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/html; charset=utf-8"
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp and "form-action 'self'" in csp
    assert csp.replace("form-action 'self'", "form-action 'none'") == page(n).headers["Content-Security-Policy"]
    text = r.text
    assert '<span class="state failed" id="job-state">finished (failed)</span>' in text
    facts = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", text))
    assert facts["attempts"] == "1/1" and facts["outcome"] == "failed"
    assert facts["scheduled"] == "at once" and "in 30 min</time>" in page(n, f"/_utils/jobs/{QTYPE}/later").text
    for when in ("started", "ended"):
        assert facts[when].endswith(" ago</time>"), facts
    assert "&quot;mode&quot;: &quot;fail&quot;" in text  # the data, as JSON text
    errors = re.search(r'<ol id="errors" reversed>(.*?)</ol>', text, re.S).group(1)
    assert errors.count('<li class="job-error">') == 1
    assert "<code>ValueError</code>: &lt;img src=x onerror=" in errors
    assert "<details><summary>traceback</summary><pre>Traceback (most recent call last):" in errors
    assert 'action="/_utils/jobs/mail/failing/_retry"' in text and 'class="retry">Retry</button>' in text
    assert re.search(r'<input type="hidden" name="csrf" value="[0-9a-f]+\.[\w-]+">', text)
    # the running job: markup in its id, data and progress all shown as text, a cancel button
    held = page(n, f"/_utils/jobs/{QTYPE}/{quote(INJECTED, safe='')}").text
    assert held.lower().count("<script") == 0 and f"<h1>Job <code>{INJECTED_TEXT}</code></h1>" in held
    assert '<span class="state running" id="job-state">running</span>' in held
    assert 'class="cancel">Cancel</button>' in held and "_retry" not in held
    assert INJECTED_TEXT.replace("&quot;", "\\&quot;") in held  # the progress, escaped as JSON text


def test_the_documents_jobs_have_no_buttons_and_refuse_a_post(n) -> None:
    held = n.request("GET", "/_jobs/_replicator_docs?state=running").json()["jobs"]
    assert held, "the documents' jobs, held by this node's doc processor"
    path = f"/_utils/jobs/_replicator_docs/{quote(held[0]['id'], safe='')}"
    text = page(n, path).text
    assert "<form" not in text and "hold on the _replicator documents" in text
    token = re.search(r'name="csrf" value="([^"]+)"', page(n, f"/_utils/jobs/{QTYPE}/failing").text).group(1)
    for action in ("_cancel", "_retry"):
        r = requests.post(n.url + path + "/" + action, data={"csrf": token}, allow_redirects=False, timeout=30)
        assert r.status_code == 403 and r.json()["error"] == "forbidden"
    assert n.request("GET", f"/_jobs/_replicator_docs/{quote(held[0]['id'], safe='')}").status == 200


def test_a_missing_job_or_type_is_a_404(n) -> None:
    for path in (
        f"/_utils/jobs/{QTYPE}/nope",
        "/_utils/jobs/no-type/x",
        "/_utils/jobs/mail",
        f"/_utils/jobs/{QTYPE}/failing/_other",
    ):
        r = page(n, path)
        assert r.status_code == 404 and r.json()["error"] == "not_found", path
    browser = page(n, f"/_utils/jobs/{QTYPE}/nope%3Cb%3E", headers={"Accept": "text/html"})
    assert browser.status_code == 404 and "<h1>No job <code>nope&lt;b&gt;</code></h1>" in browser.text
    assert requests.get(n.url + f"/_utils/jobs/{QTYPE}/failing/_retry", timeout=30).status_code == 405


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
    args = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--dump-dom",
        url,
    ]
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


@pytest.mark.slow
@pytest.mark.skipif(
    not os.path.exists(CHROMIUM) or not shutil.which(CHROMIUM),
    reason="Debian's chromium is not installed (.ci/run installs it)",
)
def test_headless_chromium_renders_the_page_and_runs_no_injected_script(n, tmp_path) -> None:
    # the control: this browser, so started, does run a page's scripts
    control = dump_dom('data:text/html,<title>t</title><script>document.title="ran"</script>', tmp_path)
    assert "<title>ran</title>" in control

    dom = dump_dom(n.url + "/_utils/", tmp_path)
    assert TITLE in dom and "pwned</title>" not in dom  # neither injection ran
    assert "<script" not in dom.lower() and "<img" not in dom  # nor became an element
    assert INJECTED_TEXT.replace("&quot;", '"') in dom  # the id is shown as text
    assert "doc&lt;b&gt;bold&lt;/b&gt;&amp;co" in dom
    for shown in ("plain-job", "doc-2"):
        assert f"<code>{shown}</code>" in dom
    for state in ("running", "crashing"):
        assert f">{state}</td>" in dom
    for table in ("types-table", "running-table", "failures-table", "delayed-table"):
        assert f'<table id="{table}">' in dom
    assert "<code>failing</code>" in dom and "<code>later</code>" in dom


def test_a_paused_type_says_so_in_the_types_table() -> None:
    from actors.http.status_page import queue_section

    types = [
        {"type": "mail", "timeout": 30.0, "pending": 3, "paused": True},
        {"type": "other", "timeout": 30.0, "pending": 0, "paused": False},
    ]
    html = queue_section({"types": types}, time.time())
    paused, running = re.findall(r'<tr class="queue-type[^"]*">.*?</tr>', html)
    assert 'class="queue-type paused"' in paused and '<td class="state">paused</td>' in paused
    assert "paused" not in running.replace("queue-type", "")
