"""The node's read-only status page (``GET /_utils/``): server-rendered HTML.

Principle: one pure function from the data the API already serves (the
queue's types, running jobs, latest failures and next delayed jobs, as
``fdblayer.jobs.overview.queue_status`` reads them; the ``_scheduler/jobs``
and ``_scheduler/docs`` entries, as :mod:`actors.http.monitoring` shapes
them, URLs' passwords masked) to a page that needs no JavaScript. Job ids, reasons, URLs and document ids are user
data: every value goes through :func:`esc` (``html.escape`` with quotes)
and nothing else reaches the markup. The page carries a
Content-Security-Policy that allows no script at all and only its own
style sheet (by hash), so a value that ever slipped through could still
not run.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import time
from typing import Any, Iterable, Mapping
from urllib.parse import urlencode

#: History entries shown per job (newest first).
RECENT_HISTORY = 5
TITLE = "otpjobs status"

STYLE = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}"
    "h1{font-size:1.4em;margin:0}h2{font-size:1.15em;margin:1.5em 0 .4em}h3{font-size:1em;margin:1em 0 .3em}"
    "table{border-collapse:collapse;width:100%}"
    "th,td{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}"
    "th{background:#f4f4f4}code{font-size:.95em;word-break:break-all}"
    "ol{margin:0;padding-left:1.2em}.meta{color:#666}.empty{color:#666;font-style:italic}"
    ".state{font-weight:600}.running,.completed{color:#17692b}.crashing,.error,.failed{color:#a8201a}"
    ".pending,.initializing,.starting{color:#8a5a00}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
#: No script, no plugin, no frame, no form, no external fetch; only the inline style above.
CSP = (f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = [("Content-Security-Policy", CSP), ("X-Frame-Options", "DENY"),
                    ("Referrer-Policy", "no-referrer")]


def esc(value: Any) -> str:
    """``value`` as HTML text: None is a dash, dicts and lists are compact JSON."""
    if value is None:
        return "&#8212;"
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return html.escape(str(value), quote=True)


def job_state(job: Mapping[str, Any]) -> str:
    """A scheduler job's state as ``_scheduler/docs`` would name it."""
    pid = job.get("pid")
    if pid == "<starting>":
        return "starting"
    if pid:
        return "running"
    history = job.get("history") or []
    if history and history[0].get("type") == "crashed":
        return "crashing"
    return "pending"


def _state_cell(state: str) -> str:
    # the state is also a class name: only known words, never user data
    known = {"running", "completed", "crashing", "error", "failed", "pending", "initializing", "starting"}
    css = state if state in known else "other"
    return f'<td class="state {css}">{esc(state)}</td>'


def _history(entries: Iterable[Mapping[str, Any]]) -> str:
    items = []
    for entry in list(entries)[:RECENT_HISTORY]:
        reason = entry.get("reason")
        text = f"<time>{esc(entry.get('timestamp'))}</time> {esc(entry.get('type'))}"
        items.append(f"<li>{text}{': ' + esc(reason) if reason is not None else ''}</li>")
    return f"<ol>{''.join(items)}</ol>" if items else '<span class="empty">none</span>'


def _work(entry: Mapping[str, Any]) -> str:
    if entry.get("source") is not None or entry.get("target") is not None:
        return f"<code>{esc(entry.get('source'))}</code> &#8594; <code>{esc(entry.get('target'))}</code>"
    return "&#8212;"


def jobs_table(jobs: list[Mapping[str, Any]]) -> str:
    """The jobs' table (``_scheduler/jobs`` entries)."""
    if not jobs:
        return '<p class="empty">No jobs.</p>'
    rows = []
    for job in jobs:
        doc = None if job.get("doc_id") is None else f"{job.get('database')}/{job.get('doc_id')}"
        rows.append(
            "<tr class=\"job\">"
            f'<td class="id"><code>{esc(job.get("id"))}</code></td>'
            f"{_state_cell(job_state(job))}"
            f"<td>{_work(job)}</td>"
            f"<td>{esc(doc)}</td>"
            f"<td>{esc(job.get('user'))}</td>"
            f"<td>{esc(job.get('start_time'))}</td>"
            f'<td class="history">{_history(job.get("history") or [])}</td>'
            "</tr>")
    return ('<table id="jobs-table"><thead><tr><th>id</th><th>state</th><th>source &#8594; target</th>'
            "<th>document</th><th>user</th><th>started</th><th>recent history (newest first)</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def docs_table(docs: list[Mapping[str, Any]]) -> str:
    """The documents' table (``_scheduler/docs`` entries)."""
    if not docs:
        return '<p class="empty">No documents.</p>'
    rows = []
    for doc in docs:
        rows.append(
            "<tr class=\"doc\">"
            f"<td>{esc(doc.get('database'))}</td>"
            f'<td class="id"><code>{esc(doc.get("doc_id"))}</code></td>'
            f"{_state_cell(str(doc.get('state')))}"
            f"<td>{_work(doc)}</td>"
            f"<td>{esc(doc.get('error_count'))}</td>"
            f"<td>{esc(doc.get('node'))}</td>"
            f"<td>{esc(doc.get('start_time'))}</td>"
            f"<td>{esc(doc.get('last_updated'))}</td>"
            f"<td><code>{esc(doc.get('info'))}</code></td>"
            "</tr>")
    return ('<table id="docs-table"><thead><tr><th>database</th><th>doc id</th><th>state</th>'
            "<th>source &#8594; target</th><th>errors</th><th>node</th><th>started</th><th>last updated</th>"
            f"<th>info</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


#: The columns of the queue's types table: (heading, key of a ``GET /_jobs`` entry).
TYPE_COLUMNS = (("type", "type"), ("timeout (s)", "timeout"), ("pending", "pending"), ("delayed", "scheduled"),
                ("claimed", "claimed"), ("running", "running"), ("finished", "finished"), ("failed", "failed"))


def _when(seconds: Any, now: float) -> str:
    """An epoch time as ISO 8601 UTC with how far it is from ``now`` (HTML)."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds < 1e11:
        return esc(None)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    delta = seconds - now
    rel = f"in {_span(delta)}" if delta > 0 else f"{_span(-delta)} ago"
    return f'<time title="{esc(stamp)}">{esc(rel)}</time>'


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def _error(error: Any) -> str:
    if not isinstance(error, Mapping):
        return esc(error)
    return f"<code>{esc(error.get('type'))}</code>: {esc(error.get('message'))}"


def _attempt(job: Mapping[str, Any]) -> str:
    """``attempt/max_attempts``, or the attempt alone when the job has no limit of its own."""
    most = job.get("max_attempts")
    return esc(job.get("attempt")) + (f"/{esc(most)}" if most is not None else "")


def _job_row(job: Mapping[str, Any], cells: str) -> str:
    return (f'<tr class="queue-job"><td>{esc(job.get("type"))}</td>'
            f'<td class="id"><code>{esc(job.get("id"))}</code></td>{cells}</tr>')


def _jobs_list(section: str, title: str, jobs: list[Mapping[str, Any]], head: str, cells: Any, empty: str) -> str:
    body = (f'<p class="empty">{esc(empty)}</p>' if not jobs else
            f'<table id="{section}-table"><thead><tr><th>type</th><th>id</th>{head}</tr></thead>'
            f"<tbody>{''.join(_job_row(j, cells(j)) for j in jobs)}</tbody></table>")
    return f'<h3 id="{section}">{esc(title)}</h3>{body}'


def queue_section(queue: Mapping[str, Any] | None, now: float, error: str | None = None) -> str:
    """The queue's part of the page (see :func:`fdblayer.jobs.overview.queue_status`)."""
    if queue is None:
        return f'<section id="queues"><h2>Queues</h2><p class="empty">{esc(error or "No store.")}</p></section>'
    types = queue.get("types") or []
    if not types:
        table = '<p class="empty">No job types.</p>'
    else:
        head = "".join(f"<th>{esc(h)}</th>" for h, _ in TYPE_COLUMNS)
        rows = "".join('<tr class="queue-type">' + "".join(f"<td>{esc(t.get(k))}</td>" for _, k in TYPE_COLUMNS)
                       + "</tr>" for t in types)
        table = f'<table id="types-table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    cut = queue.get("types_cut") or 0
    more = f'<p class="meta">{esc(cut)} more types: see <a href="/_jobs">_jobs</a>.</p>' if cut else ""
    running = _jobs_list("running", "Running", queue.get("running") or [],
                         "<th>attempt</th><th>worker</th><th>progress</th><th>started</th>",
                         lambda j: (f"<td>{_attempt(j)}</td>"
                                    f"<td><code>{esc(j.get('worker'))}</code></td>"
                                    f"<td><code>{esc(j.get('progress'))}</code></td>"
                                    f"<td>{_when(j.get('started'), now)}</td>"), "No job is running.")
    failures = _jobs_list("failures", "Latest failures", queue.get("failures") or [],
                          "<th>attempts</th><th>failed</th><th>error</th>",
                          lambda j: (f"<td>{_attempt(j)}</td><td>{_when(j.get('ended'), now)}</td>"
                                     f"<td>{_error(j.get('error'))}</td>"), "No failed job.")
    delayed = _jobs_list("delayed", "Next delayed", queue.get("delayed") or [],
                         "<th>due</th><th>attempt</th><th>data</th>",
                         lambda j: (f"<td>{_when(j.get('scheduled_time'), now)}</td>"
                                    f"<td>{esc(j.get('attempt'))}</td><td><code>{esc(j.get('data'))}</code></td>"),
                         "No delayed job.")
    return f'<section id="queues"><h2>Queues</h2>{table}{more}{running}{failures}{delayed}</section>'


def _pager(skip: int, limit: int, more: bool) -> str:
    links = []
    if skip > 0:
        links.append(f'<a href="/_utils/?{esc(urlencode({"skip": max(0, skip - limit), "limit": limit}))}">'
                     "&#8592; previous</a>")
    if more:
        links.append(f'<a href="/_utils/?{esc(urlencode({"skip": skip + limit, "limit": limit}))}">'
                     "next &#8594;</a>")
    return f"<nav>{' · '.join(links)}</nav>" if links else ""


def render(*, node: str, version: str, jobs_total: int, jobs: list[Mapping[str, Any]], docs_total: int,
           docs: list[Mapping[str, Any]], skip: int, limit: int, docs_error: str | None = None,
           now: float | None = None, queue: Mapping[str, Any] | None = None,
           queue_error: str | None = None) -> str:
    """The whole page.

    Args:
        node: this node's name.
        version: the CouchDB API version the node answers as.
        jobs_total, jobs: how many jobs the scheduler has, and this page of them.
        docs_total, docs: how many documents the store has, and this page of them.
        skip, limit: the page (both lists are cut the same way).
        docs_error: why the documents could not be read (None: they were).
        now: wall-clock seconds shown as the page's time.
        queue, queue_error: the queue's status (``overview.queue_status``),
            or why it could not be read.
    """
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    docs_part = (f'<p class="empty">{esc(docs_error)}</p>' if docs_error is not None else docs_table(docs))
    more = skip + limit < max(jobs_total, docs_total)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="referrer" content="no-referrer"><title>{esc(TITLE)}</title><style>{STYLE}</style></head>'
        "<body><header><h1>otpjobs</h1>"
        f'<p class="meta">node <code id="node">{esc(node)}</code> · CouchDB API {esc(version)} · '
        f'as of <time id="generated">{esc(stamp)}</time> · <a href="/_utils/">reload</a></p></header>'
        f"{queue_section(queue, now, queue_error)}"
        f'<section id="jobs"><h2>Scheduler jobs <span class="meta">({esc(len(jobs))} shown of '
        f'<span id="jobs-total">{esc(jobs_total)}</span>, from {esc(skip)})</span></h2>{jobs_table(jobs)}</section>'
        f'<section id="docs"><h2>Documents <span class="meta">({esc(len(docs))} shown of '
        f'<span id="docs-total">{esc(docs_total)}</span>, from {esc(skip)})</span></h2>{docs_part}</section>'
        f"{_pager(skip, limit, more)}"
        '<p class="meta">The same data as JSON: <a href="/_jobs">_jobs</a>, <a href="/_workers">_workers</a>, '
        '<a href="/_scheduler/jobs">_scheduler/jobs</a>, <a href="/_scheduler/docs">_scheduler/docs</a>.</p>'
        "</body></html>\n")


def redirect_page(location: str) -> str:
    """The body of a redirect to ``location``."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Moved</title></head>'
            f'<body><p>Moved to <a href="{esc(location)}">{esc(location)}</a>.</p></body></html>\n')
