"""A queue job's page (``GET /_utils/jobs/{type}/{id}``): its data,
progress, state, attempts, outcome, errors and result, and the Retry and
Cancel buttons (forms that post to the same origin with a CSRF token).
Every value is escaped; the page allows no script (the status page's
policy, :mod:`actors.http.status_page`, whose parts it shares).
"""

from __future__ import annotations

import time
from typing import Any, Mapping
from urllib.parse import quote

from actors.jsonable import dumps
from actors.http.status_page import MAX_SHOWN, STYLE, TITLE, _attempt, _when, esc, job_path

__all__ = ["job_page", "missing_job_page", "NOTICES"]

#: Keys of a job view the page shows in its own places (any other is listed as it comes).
_SHOWN = {
    "id",
    "state",
    "scheduled_time",
    "attempt",
    "max_attempts",
    "outcome",
    "progress",
    "error",
    "last_error",
    "errors",
    "worker",
    "started",
    "ended",
    "data",
    "result",
    "type",
    "claimed",
}
#: The notice shown after an action (the query's ``done``: only these words, never echoed).
NOTICES = {
    "retried": "Retried: the job was put back, with a fresh attempt count.",
    "cancelled": "Cancelled: the job was removed (a running handler sees ctx.stopping).",
}


def _pretty(value: Any) -> str:
    text = dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    if len(text) > MAX_SHOWN:
        text = text[:MAX_SHOWN] + "\n... (cut: the whole value is in the JSON view)"
    return f"<pre>{esc(text)}</pre>"


def _error_entry(entry: Mapping[str, Any], now: float) -> str:
    head = []
    if entry.get("attempt") is not None:
        head.append(f"attempt {esc(entry.get('attempt'))}")
    if entry.get("at") is not None:
        head.append(_when(entry.get("at"), now))
    what = f"<code>{esc(entry.get('type'))}</code>: {esc(entry.get('message'))}"
    trace = entry.get("traceback")
    trace_html = (
        f"<details><summary>traceback</summary><pre>{esc(str(trace)[:MAX_SHOWN])}</pre></details>" if trace else ""
    )
    return f'<li class="job-error">{" · ".join(head) + ": " if head else ""}{what}{trace_html}</li>'


def _errors(view: Mapping[str, Any], now: float) -> str:
    """Every failed attempt's error (``errors``, newest first), else the last error alone."""
    errors = view.get("errors")
    entries = [e for e in errors if isinstance(e, Mapping)] if isinstance(errors, list) else []
    last = view.get("last_error")
    if not entries and isinstance(last, Mapping):
        entries = [last]
    elif not entries and last is not None:
        entries = [{"message": last}]
    if not entries:
        return '<p class="empty">No error.</p>'
    return f'<ol id="errors" reversed>{"".join(_error_entry(e, now) for e in reversed(entries))}</ol>'


def _action(path: str, action: str, label: str, csrf: str, extra: Mapping[str, str] | None = None) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in {"csrf": csrf, **(extra or {})}.items()
    )
    return (
        f'<form method="post" action="{esc(path + "/" + action)}">{hidden}'
        f'<button type="submit" class="{esc(action.strip("_"))}">{esc(label)}</button></form>'
    )


def job_page(
    *,
    node: str,
    job_type: str,
    view: Mapping[str, Any],
    csrf: str,
    now: float | None = None,
    done: str | None = None,
    reserved: str | None = None,
) -> str:
    """The page of one queue job (``overview.job_view``), with its retry or cancel buttons.

    Args:
        node: this node's name.
        job_type, view: the job's type and view (its data and result whole).
        csrf: the token the forms carry (:meth:`actors.http.auth.Auth.csrf_token`).
        done: the action just taken (a key of :data:`NOTICES`, else ignored).
        reserved: why the page may not act on the job (then it has no button), or None.
    """
    now = time.time() if now is None else now
    job_id = view.get("id")
    path = job_path(job_type, job_id) or "/_utils/"
    state = str(view.get("state"))
    finished = state == "finished"
    if reserved is not None:
        actions, hint = "", reserved
    elif finished:
        actions = _action(path, "_retry", "Retry", csrf) + _action(path, "_cancel", "Delete", csrf, {"was": "finished"})
        hint = "Retry puts the job back with a fresh attempt count; Delete removes it and its result."
    else:
        actions = _action(path, "_cancel", "Cancel", csrf, {"was": "unfinished"})
        hint = "Cancel removes the job; a running handler sees ctx.stopping and should return."
    outcome = view.get("outcome")
    shown_state = f"{state} ({outcome})" if finished and outcome else state
    # the class is a known word, never user data
    css = state if state in ("pending", "claimed", "running") else "failed" if outcome == "failed" else "completed"
    facts = [
        ("type", f"<code>{esc(job_type)}</code>"),
        ("id", f"<code>{esc(job_id)}</code>"),
        ("state", f'<span class="state {css}" id="job-state">{esc(shown_state)}</span>'),
        ("attempts", _attempt(view)),
        ("outcome", esc(outcome)),
        ("worker", f"<code>{esc(view.get('worker'))}</code>"),
        (
            "scheduled",
            "at once"
            if view.get("scheduled_time") == 0  # due when added
            else _when(view.get("scheduled_time"), now),
        ),
        ("started", _when(view.get("started"), now)),
        ("ended", _when(view.get("ended"), now)),
        ("progress", f"<code>{esc(view.get('progress') or None)}</code>"),
    ]
    facts += [(str(key), f"<code>{esc(value)}</code>") for key, value in view.items() if key not in _SHOWN]
    notice = f'<p class="notice" id="notice">{esc(NOTICES[done])}</p>' if done in NOTICES else ""
    result = f"<h2>Result</h2>{_pretty(view.get('result'))}" if finished and outcome != "failed" else ""
    json_path = f"/_jobs/{quote(job_type, safe='')}/{quote(str(job_id), safe='')}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="referrer" content="no-referrer"><title>{esc(TITLE)}: job</title><style>{STYLE}</style></head>'
        f'<body><header><p class="meta"><a href="/_utils/">&#8592; status</a> · node <code>{esc(node)}</code> · '
        f"as of <time>{esc(time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now)))}</time> · "
        f'<a href="{esc(path)}">reload</a></p>'
        f"<h1>Job <code>{esc(job_id)}</code></h1></header>{notice}"
        f'<section id="job"><dl>{"".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)}</dl>'
        f'<div id="actions">{actions}<p class="meta">{esc(hint)}</p></div></section>'
        f'<section id="data"><h2>Data</h2>{_pretty(view.get("data"))}</section>'
        f"{result}"
        f'<section id="job-errors"><h2>Errors</h2>{_errors(view, now)}</section>'
        f'<p class="meta">The same as JSON: <a href="{esc(json_path)}">{esc(json_path)}</a>.</p>'
        "</body></html>\n"
    )


def missing_job_page(*, node: str, job_type: str, job_id: str, done: str | None = None) -> str:
    """The page of a job that does not exist (removed, or never added), for a browser."""
    notice = f'<p class="notice" id="notice">{esc(NOTICES[done])}</p>' if done in NOTICES else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="referrer" content="no-referrer"><title>{esc(TITLE)}: no such job</title>'
        f'<style>{STYLE}</style></head><body><p class="meta"><a href="/_utils/">&#8592; status</a> · '
        f"node <code>{esc(node)}</code></p><h1>No job <code>{esc(job_id)}</code></h1>{notice}"
        f'<p id="missing">The type <code>{esc(job_type)}</code> has no job <code>{esc(job_id)}</code>: it was '
        "removed (cancelled, or pruned), or never added.</p></body></html>\n"
    )
