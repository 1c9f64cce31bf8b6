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

Beside the queue's tables: a chart per type of the jobs that succeeded
and failed per minute over the last hour (inline SVG drawn here from the
HTTP process's readings of the counters, :mod:`actors.http.throughput`),
and the worker hosts' last beats (``fdblayer.jobs.hosts.list_hosts``).
Every job id in a table links to the job's page, ``/_utils/jobs/{type}/{id}``
(:func:`actors.http.job_page.job_page`: its data, progress, state, attempts, outcome, errors
with their tracebacks, times), whose retry and cancel buttons are forms
posting to the same origin with a CSRF token (see
:meth:`actors.http.auth.Auth.csrf_token`); that page's policy differs from
the others' in one word only: ``form-action 'self'``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import time
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote, urlencode

from actors.jsonable import dumps

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
    ".pending,.initializing,.starting,.claimed{color:#8a5a00}"
    ".charts{display:flex;flex-wrap:wrap;gap:.5em 1.5em}figure{margin:0}figcaption{font-size:.9em}"
    ".ok{color:#17692b}.bad{color:#a8201a}pre{background:#f6f6f6;padding:.5em;overflow-x:auto;margin:.3em 0;"
    "white-space:pre-wrap;word-break:break-all}dl{display:grid;grid-template-columns:max-content auto;"
    "gap:.2em 1em;margin:0}dt{color:#666}dd{margin:0}form{display:inline-block;margin:.5em .5em .5em 0}"
    "button{font:inherit;padding:.3em 1em;cursor:pointer}.notice{background:#eef6ee;padding:.4em .6em}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
#: No script, no plugin, no frame, no form, no external fetch; only the inline style above.
CSP = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [("Content-Security-Policy", CSP), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer")]
#: A job's page: the same, but its forms may post to this origin (and nowhere else).
FORM_CSP = CSP.replace("form-action 'none'", "form-action 'self'")
FORM_SECURITY_HEADERS = [("Content-Security-Policy", FORM_CSP)] + SECURITY_HEADERS[1:]
#: Hosts the page lists at most (``/_workers`` has them all).
MAX_HOSTS = 100
#: Jobs of a host's running list linked at most.
HOST_RUNNING_SHOWN = 5
#: Characters of a job's data or result (as JSON) shown on its page at most.
MAX_SHOWN = 100_000


def esc(value: Any) -> str:
    """``value`` as HTML text: None is a dash, dicts and lists are compact JSON."""
    if value is None:
        return "&#8212;"
    if isinstance(value, (dict, list)):
        value = dumps(value, sort_keys=True, separators=(",", ":"), default=str)
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
    known = {
        "running",
        "completed",
        "crashing",
        "error",
        "failed",
        "pending",
        "initializing",
        "starting",
        "claimed",
        "finished",
    }
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
            '<tr class="job">'
            f'<td class="id"><code>{esc(job.get("id"))}</code></td>'
            f"{_state_cell(job_state(job))}"
            f"<td>{_work(job)}</td>"
            f"<td>{esc(doc)}</td>"
            f"<td>{esc(job.get('user'))}</td>"
            f"<td>{esc(job.get('start_time'))}</td>"
            f'<td class="history">{_history(job.get("history") or [])}</td>'
            "</tr>"
        )
    return (
        '<table id="jobs-table"><thead><tr><th>id</th><th>state</th><th>source &#8594; target</th>'
        "<th>document</th><th>user</th><th>started</th><th>recent history (newest first)</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def docs_table(docs: list[Mapping[str, Any]]) -> str:
    """The documents' table (``_scheduler/docs`` entries)."""
    if not docs:
        return '<p class="empty">No documents.</p>'
    rows = []
    for doc in docs:
        rows.append(
            '<tr class="doc">'
            f"<td>{esc(doc.get('database'))}</td>"
            f'<td class="id"><code>{esc(doc.get("doc_id"))}</code></td>'
            f"{_state_cell(str(doc.get('state')))}"
            f"<td>{_work(doc)}</td>"
            f"<td>{esc(doc.get('error_count'))}</td>"
            f"<td>{esc(doc.get('node'))}</td>"
            f"<td>{esc(doc.get('start_time'))}</td>"
            f"<td>{esc(doc.get('last_updated'))}</td>"
            f"<td><code>{esc(doc.get('info'))}</code></td>"
            "</tr>"
        )
    return (
        '<table id="docs-table"><thead><tr><th>database</th><th>doc id</th><th>state</th>'
        "<th>source &#8594; target</th><th>errors</th><th>node</th><th>started</th><th>last updated</th>"
        f"<th>info</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


#: The columns of the queue's types table: (heading, key of a ``GET /_jobs`` entry).
TYPE_COLUMNS = (
    ("type", "type"),
    ("timeout (s)", "timeout"),
    ("pending", "pending"),
    ("delayed", "scheduled"),
    ("claimed", "claimed"),
    ("running", "running"),
    ("finished", "finished"),
    ("failed", "failed"),
)


def _list(value: Any) -> list[Any]:
    """``value`` if it is a list, else an empty one (a host's beat is data read from the store)."""
    return value if isinstance(value, list) else []


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


def job_path(job_type: Any, job_id: Any) -> str | None:
    """The path of a job's page (not escaped for HTML), or None for a type or id a URL cannot
    name (not a string, empty, or a dot segment, which browsers resolve away even escaped)."""
    if not isinstance(job_type, str) or not isinstance(job_id, str) or {job_type, job_id} & {"", ".", ".."}:
        return None
    return f"/_utils/jobs/{quote(job_type, safe='')}/{quote(job_id, safe='')}"


def job_link(job_type: Any, job_id: Any) -> str:
    """The job's id as code, linked to its page when it has one."""
    path = job_path(job_type, job_id)
    code = f"<code>{esc(job_id)}</code>"
    return code if path is None else f'<a href="{esc(path)}">{code}</a>'


def _job_row(job: Mapping[str, Any], cells: str) -> str:
    return (
        f'<tr class="queue-job"><td>{esc(job.get("type"))}</td>'
        f'<td class="id">{job_link(job.get("type"), job.get("id"))}</td>{cells}</tr>'
    )


def _jobs_list(section: str, title: str, jobs: list[Mapping[str, Any]], head: str, cells: Any, empty: str) -> str:
    body = (
        f'<p class="empty">{esc(empty)}</p>'
        if not jobs
        else f'<table id="{section}-table"><thead><tr><th>type</th><th>id</th>{head}</tr></thead>'
        f"<tbody>{''.join(_job_row(j, cells(j)) for j in jobs)}</tbody></table>"
    )
    return f'<h3 id="{section}">{esc(title)}</h3>{body}'


def queue_section(queue: Mapping[str, Any] | None, now: float, error: str | None = None) -> str:
    """The queue's part of the page (see :func:`fdblayer.jobs.overview.queue_status`)."""
    if queue is None:
        return f'<section id="queues"><h2>Queues</h2><p class="empty">{esc(error or "No store.")}</p></section>'
    types = queue.get("types") or []
    if not types:
        table = '<p class="empty">No job types.</p>'
    else:
        head = "".join(f"<th>{esc(h)}</th>" for h, _ in TYPE_COLUMNS) + "<th></th>"
        rows = "".join(
            ('<tr class="queue-type paused">' if t.get("paused") else '<tr class="queue-type">')
            + "".join(f"<td>{esc(t.get(k))}</td>" for _, k in TYPE_COLUMNS)
            + ('<td class="state">paused</td>' if t.get("paused") else "<td></td>")
            + "</tr>"
            for t in types
        )
        table = f'<table id="types-table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    cut = queue.get("types_cut") or 0
    more = f'<p class="meta">{esc(cut)} more types: see <a href="/_jobs">_jobs</a>.</p>' if cut else ""
    running = _jobs_list(
        "running",
        "Running",
        queue.get("running") or [],
        "<th>attempt</th><th>worker</th><th>progress</th><th>started</th>",
        lambda j: (
            f"<td>{_attempt(j)}</td>"
            f"<td><code>{esc(j.get('worker'))}</code></td>"
            f"<td><code>{esc(j.get('progress'))}</code></td>"
            f"<td>{_when(j.get('started'), now)}</td>"
        ),
        "No job is running.",
    )
    failures = _jobs_list(
        "failures",
        "Latest failures",
        queue.get("failures") or [],
        "<th>attempts</th><th>failed</th><th>error</th>",
        lambda j: f"<td>{_attempt(j)}</td><td>{_when(j.get('ended'), now)}</td><td>{_error(j.get('error'))}</td>",
        "No failed job.",
    )
    delayed = _jobs_list(
        "delayed",
        "Next delayed",
        queue.get("delayed") or [],
        "<th>due</th><th>attempt</th><th>data</th>",
        lambda j: (
            f"<td>{_when(j.get('scheduled_time'), now)}</td>"
            f"<td>{esc(j.get('attempt'))}</td><td><code>{esc(j.get('data'))}</code></td>"
        ),
        "No delayed job.",
    )
    return f'<section id="queues"><h2>Queues</h2>{table}{more}{running}{failures}{delayed}</section>'


# ------------------------------------------------------------- charts
#: The chart's box (SVG user units): plot from (CHART_LEFT, CHART_TOP) to (CHART_RIGHT, CHART_BOTTOM).
CHART_WIDTH, CHART_HEIGHT = 330, 86
CHART_LEFT, CHART_RIGHT, CHART_TOP, CHART_BOTTOM = 36, 324, 8, 66
#: Colours of the two series (as the page's state colours).
SUCCEEDED_COLOUR, FAILED_COLOUR = "#17692b", "#a8201a"


def _per(interval: float) -> str:
    """``minute`` for 60 s, else the interval in seconds."""
    return "minute" if interval == 60 else f"{interval:g} s"


def _polyline(css: str, colour: str, values: list[int], points: int, top: int) -> str:
    step = (CHART_RIGHT - CHART_LEFT) / max(1, points - 1)
    first = points - len(values)  # the newest difference is at the right edge
    coords = " ".join(
        f"{CHART_LEFT + (first + i) * step:.1f},{CHART_BOTTOM - value / top * (CHART_BOTTOM - CHART_TOP):.1f}"
        for i, value in enumerate(values)
    )
    return (
        f'<polyline class="{css}" fill="none" stroke="{colour}" stroke-width="1.5" '
        f'stroke-linejoin="round" points="{coords}"/>'
    )


def chart_svg(series: list[tuple[float, int, int]], points: int, interval: float) -> str:
    """An inline SVG of the succeeded and failed counts of ``series`` (oldest first), one
    per interval, the newest at the right; drawn with attributes only (no style, no script)."""
    succeeded = [int(row[1]) for row in series][-points:]
    failed = [int(row[2]) for row in series][-points:]
    peak = max(succeeded + failed, default=0)
    top = max(1, peak)
    window = _span(points * interval)
    label = (
        f"jobs per {_per(interval)} over the last {window}: {sum(succeeded)} succeeded, "
        f"{sum(failed)} failed, at most {peak} in one {_per(interval)}"
    )
    small = 'font-size="10" fill="#666"'
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" '
        f'viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" aria-label="{esc(label)}" '
        f'data-points="{len(succeeded)}"><title>{esc(label)}</title>'
        f'<line x1="{CHART_LEFT}" y1="{CHART_TOP}" x2="{CHART_RIGHT}" y2="{CHART_TOP}" stroke="#eee"/>'
        f'<line x1="{CHART_LEFT}" y1="{CHART_BOTTOM}" x2="{CHART_RIGHT}" y2="{CHART_BOTTOM}" stroke="#bbb"/>'
        f'<text x="{CHART_LEFT - 4}" y="{CHART_TOP + 4}" text-anchor="end" {small}>{esc(top)}</text>'
        f'<text x="{CHART_LEFT - 4}" y="{CHART_BOTTOM + 3}" text-anchor="end" {small}>0</text>'
        f'<text x="{CHART_LEFT}" y="{CHART_HEIGHT - 4}" {small}>&#8722;{esc(window)}</text>'
        f'<text x="{CHART_RIGHT}" y="{CHART_HEIGHT - 4}" text-anchor="end" {small}>now</text>'
        + (
            _polyline("succeeded", SUCCEEDED_COLOUR, succeeded, points, top)
            + _polyline("failed", FAILED_COLOUR, failed, points, top)
            if succeeded
            else ""
        )
        + "</svg>"
    )


def charts_section(throughput: Mapping[str, Any] | None, now: float) -> str:
    """Per type, the jobs that succeeded and failed per interval (see :mod:`actors.http.throughput`)."""
    if throughput is None:
        return ""
    interval, points = throughput.get("interval") or 60, throughput.get("points") or 60
    series = throughput.get("series") or {}
    title = f"Jobs finished per {_per(interval)}, last {_span(points * interval)}"
    if not series:
        body = '<p class="empty">No job type read yet.</p>'
    else:
        figures = []
        for job_type, rows in series.items():
            rows = list(rows)[-points:]
            done, failed = sum(r[1] for r in rows), sum(r[2] for r in rows)
            if rows:
                caption = (
                    f'<span class="ok">&#9632; succeeded <span class="total-succeeded">{esc(done)}</span>'
                    f'</span> · <span class="bad">&#9632; failed <span class="total-failed">{esc(failed)}'
                    "</span></span>"
                )
            else:
                caption = f'<span class="meta">first reading taken: the chart starts in {esc(_span(interval))}'
                caption += "</span>"
            figures.append(
                f'<figure class="type-chart"><figcaption><code>{esc(_type_text(job_type))}</code> '
                f"{caption}</figcaption>{chart_svg(rows, points, interval)}</figure>"
            )
        body = f'<div class="charts">{"".join(figures)}</div>'
    return (
        f'<section id="throughput"><h2>{esc(title)}</h2>{body}<p class="meta">Read by this node every '
        f"{esc(_span(interval))} since its HTTP process started "
        f'(<span id="samples">{esc(throughput.get("samples", 0))}</span> readings).</p></section>'
    )


def _type_text(job_type: Any) -> Any:
    return job_type if isinstance(job_type, (str, int)) else list(job_type)


# -------------------------------------------------------------- hosts
def hosts_section(hosts: Sequence[Mapping[str, Any]] | None, now: float, error: str | None = None) -> str:
    """The worker hosts' last beats (``fdblayer.jobs.hosts.list_hosts``), at most :data:`MAX_HOSTS`."""
    if hosts is None:
        return f'<section id="hosts"><h2>Worker hosts</h2><p class="empty">{esc(error or "No store.")}</p></section>'
    if not hosts:
        return '<section id="hosts"><h2>Worker hosts</h2><p class="empty">No worker host.</p></section>'
    rows = []
    for host in hosts[:MAX_HOSTS]:
        alive = host.get("alive") is True
        status = ("draining" if host.get("draining") else "alive") if alive else "silent"
        css = {"alive": "running", "draining": "pending", "silent": "failed"}[status]
        types = _list(host.get("types"))
        running = [r for r in _list(host.get("running")) if isinstance(r, Mapping)]
        links = ", ".join(job_link(r.get("type"), r.get("id")) for r in running[:HOST_RUNNING_SHOWN])
        if len(running) > HOST_RUNNING_SHOWN or host.get("running_cut"):
            links += " &#8230;"
        rows.append(
            '<tr class="host">'
            f"<td><code>{esc(host.get('host'))}</code></td>"
            f"<td>{', '.join(f'<code>{esc(t)}</code>' for t in types) or esc(None)}</td>"
            f"<td>{esc(host.get('concurrency'))}</td><td>{esc(host.get('busy'))}</td>"
            f"<td>{esc(host.get('claimed'))}</td><td>{links or esc(None)}</td>"
            f"<td>{_when(host.get('last_beat'), now)}</td>"
            f'<td class="state {css}">{esc(status)}</td></tr>'
        )
    more = (
        f'<p class="meta">{esc(len(hosts) - MAX_HOSTS)} more hosts: see <a href="/_workers">_workers</a>.</p>'
        if len(hosts) > MAX_HOSTS
        else ""
    )
    return (
        '<section id="hosts"><h2>Worker hosts</h2><table id="hosts-table"><thead><tr><th>host</th>'
        "<th>types</th><th>concurrency</th><th>busy</th><th>claimed</th><th>running</th><th>last beat</th>"
        f"<th>alive</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{more}</section>"
    )


def _pager(skip: int, limit: int, more: bool) -> str:
    links = []
    if skip > 0:
        links.append(
            f'<a href="/_utils/?{esc(urlencode({"skip": max(0, skip - limit), "limit": limit}))}">&#8592; previous</a>'
        )
    if more:
        links.append(f'<a href="/_utils/?{esc(urlencode({"skip": skip + limit, "limit": limit}))}">next &#8594;</a>')
    return f"<nav>{' · '.join(links)}</nav>" if links else ""


def render(
    *,
    node: str,
    version: str,
    jobs_total: int,
    jobs: list[Mapping[str, Any]],
    docs_total: int,
    docs: list[Mapping[str, Any]],
    skip: int,
    limit: int,
    docs_error: str | None = None,
    now: float | None = None,
    queue: Mapping[str, Any] | None = None,
    queue_error: str | None = None,
    throughput: Mapping[str, Any] | None = None,
    hosts: Sequence[Mapping[str, Any]] | None = None,
    hosts_error: str | None = None,
) -> str:
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
        throughput: the node's readings (:meth:`actors.http.throughput.Sampler.snapshot`),
            None when it reads none.
        hosts, hosts_error: the worker hosts (``hosts.list_hosts``), or why
            they could not be read.
    """
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    docs_part = f'<p class="empty">{esc(docs_error)}</p>' if docs_error is not None else docs_table(docs)
    more = skip + limit < max(jobs_total, docs_total)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="referrer" content="no-referrer"><title>{esc(TITLE)}</title><style>{STYLE}</style></head>'
        "<body><header><h1>otpjobs</h1>"
        f'<p class="meta">node <code id="node">{esc(node)}</code> · CouchDB API {esc(version)} · '
        f'as of <time id="generated">{esc(stamp)}</time> · <a href="/_utils/">reload</a></p></header>'
        f"{queue_section(queue, now, queue_error)}"
        f"{charts_section(throughput, now)}"
        f"{hosts_section(hosts, now, hosts_error if hosts_error is not None else queue_error)}"
        f'<section id="jobs"><h2>Scheduler jobs <span class="meta">({esc(len(jobs))} shown of '
        f'<span id="jobs-total">{esc(jobs_total)}</span>, from {esc(skip)})</span></h2>{jobs_table(jobs)}</section>'
        f'<section id="docs"><h2>Documents <span class="meta">({esc(len(docs))} shown of '
        f'<span id="docs-total">{esc(docs_total)}</span>, from {esc(skip)})</span></h2>{docs_part}</section>'
        f"{_pager(skip, limit, more)}"
        '<p class="meta">The same data as JSON: <a href="/_jobs">_jobs</a>, <a href="/_workers">_workers</a>, '
        '<a href="/_scheduler/jobs">_scheduler/jobs</a>, <a href="/_scheduler/docs">_scheduler/docs</a>.</p>'
        "</body></html>\n"
    )


def redirect_page(location: str) -> str:
    """The body of a redirect to ``location``."""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Moved</title></head>'
        f'<body><p>Moved to <a href="{esc(location)}">{esc(location)}</a>.</p></body></html>\n'
    )
