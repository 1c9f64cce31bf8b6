"""The node's read-only status page (``GET /_utils/``): server-rendered HTML.

Principle: one pure function from the data the API already serves (the
``_scheduler/jobs`` entries and the ``_scheduler/docs`` entries, as
:mod:`actors.http.monitoring` shapes them, URLs' passwords masked) to a page
that needs no JavaScript. Job ids, reasons, URLs and document ids are user
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
    "h1{font-size:1.4em;margin:0}h2{font-size:1.15em;margin:1.5em 0 .4em}"
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
           now: float | None = None) -> str:
    """The whole page.

    Args:
        node: this node's name.
        version: the CouchDB API version the node answers as.
        jobs_total, jobs: how many jobs the scheduler has, and this page of them.
        docs_total, docs: how many documents the store has, and this page of them.
        skip, limit: the page (both lists are cut the same way).
        docs_error: why the documents could not be read (None: they were).
        now: wall-clock seconds shown as the page's time.
    """
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    docs_part = (f'<p class="empty">{esc(docs_error)}</p>' if docs_error is not None else docs_table(docs))
    more = skip + limit < max(jobs_total, docs_total)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="referrer" content="no-referrer"><title>{esc(TITLE)}</title><style>{STYLE}</style></head>'
        "<body><header><h1>otpjobs</h1>"
        f'<p class="meta">node <code id="node">{esc(node)}</code> · CouchDB API {esc(version)} · '
        f'as of <time id="generated">{esc(stamp)}</time> · <a href="/_utils/">reload</a></p></header>'
        f'<section id="jobs"><h2>Jobs <span class="meta">({esc(len(jobs))} shown of '
        f'<span id="jobs-total">{esc(jobs_total)}</span>, from {esc(skip)})</span></h2>{jobs_table(jobs)}</section>'
        f'<section id="docs"><h2>Documents <span class="meta">({esc(len(docs))} shown of '
        f'<span id="docs-total">{esc(docs_total)}</span>, from {esc(skip)})</span></h2>{docs_part}</section>'
        f"{_pager(skip, limit, more)}"
        '<p class="meta">The same data as JSON: <a href="/_scheduler/jobs">_scheduler/jobs</a>, '
        '<a href="/_scheduler/docs">_scheduler/docs</a>.</p>'
        "</body></html>\n")


def redirect_page(location: str) -> str:
    """The body of a redirect to ``location``."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Moved</title></head>'
            f'<body><p>Moved to <a href="{esc(location)}">{esc(location)}</a>.</p></body></html>\n')
