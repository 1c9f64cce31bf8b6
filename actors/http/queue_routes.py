"""``/_jobs``: the queue over HTTP (read-only views; the node's auth rules apply).

* ``GET /_jobs``: ``{"types": [{"type", "timeout", "jobs", "pending",
  "scheduled", "scheduled_capped", "running", "finished", "failed"}, ...]}``,
  from the per-type counters (a few keys per type, whatever the queue's size).
* ``GET /_jobs/{type}?state=&limit=&skip=``: ``{"total_rows", "offset",
  "jobs": [...]}``; each job with ``id, state, scheduled_time, attempt,
  max_attempts, outcome, progress, error, last_error, worker, started,
  ended`` and its data cut to a preview (see ``fdblayer.jobs.overview``).
* ``GET /_jobs/{type}/{id}``: one job whole, with its result.
* ``POST /_jobs/{type}`` ``{"data", "id"?, "delay"?, "at"?, "max_attempts"?,
  "priority"?, "timeout"?}``
  adds a job for the worker pools (201 ``{"ok": true, "id"}``; an id that
  exists follows the queue's resubmit rules; a type with no activity
  timeout yet is declared with the default, 30 s, in the same transaction,
  as ``jobs.enqueue`` does, so a producer needs no worker up first); ``DELETE /_jobs/{type}/{id}``
  removes one; ``POST /_jobs/{type}/{id}/_retry`` puts a finished (or
  failed) job back with a fresh attempt count (409 for a job not finished);
  ``POST /_jobs/{type}/_pause`` and ``/_resume`` pause and resume a type
  (``{"ok", "paused", "was_paused"}``; 404 for an unknown type).
  Validated as the Python API is: a bad field is a 400 that writes nothing.
* ``GET /_workers``: ``{"hosts": [...]}``, each worker host's last heartbeat
  (``host, pid, concurrency, types, workers, busy, running: [{type, id,
  attempt, for}], counts, last_beat, age, alive``).

Errors are CouchDB-shaped: 400 ``bad_request`` for a bad parameter, 404
``not_found`` for a job that does not exist or a GET of a type with no
timeout.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from fdblayer.jobs import activity, hosts, overview
from fdblayer.jobs.keys import DEFAULT_LAYOUT

__all__ = [
    "MAX_LIMIT",
    "DEFAULT_LIMIT",
    "jobs_route",
    "workers_route",
    "queue_status",
    "retry",
    "job_action",
    "reserved",
    "job_view",
    "hosts_status",
]

#: Jobs a page shows at most, and by default.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


def jobs_route(req: Any, seg: list[str], store: Callable[[], Any], error: Callable[..., Exception]) -> tuple[int, Any]:
    """Answer a GET or HEAD under ``/_jobs`` (``seg``: the path after it).

    ``store()`` opens the node's store; ``error(status, name, reason)`` makes
    the HTTP error to raise.
    """
    db = store()
    now = time.time()
    if not seg:
        return 200, {"types": [_jsonable_type(t) for t in overview.types_overview(db, DEFAULT_LAYOUT, now)]}
    job_type = seg[0]
    if not job_type or activity.get_type_timeout(db, DEFAULT_LAYOUT, job_type) is None:
        raise error(404, "not_found", f"no job type {job_type!r} (a type has an activity timeout)")
    if len(seg) == 1:
        state, limit, skip = _page_params(req.query, error)
        total, page = overview.list_jobs(db, DEFAULT_LAYOUT, job_type, state, limit, skip, now)
        return 200, {"total_rows": total, "offset": skip, "jobs": page}
    if len(seg) == 2:
        view = overview.job_view(db, DEFAULT_LAYOUT, job_type, seg[1])
        if view is None:
            raise error(404, "not_found", f"no job {seg[1]!r} of type {job_type!r}")
        return 200, view
    raise error(404, "not_found", "missing")


def jobs_write_route(
    req: Any, seg: list[str], store: Callable[[], Any], error: Callable[..., Exception]
) -> tuple[int, Any]:
    """Answer a POST or DELETE under ``/_jobs`` (see the module docstring)."""
    from actors.workers import client  # the workers' producer API: one validation for every caller
    from fdblayer.jobs import api
    from fdblayer.jobs.exceptions import EncodingError, InvalidArgument, NotFound, NoTypeTimeout

    db = store()
    job_type = seg[0] if seg else ""
    if reserved(job_type):  # a document's hold is written by its node alone
        raise error(403, "forbidden", reserved(job_type))
    try:
        if req.method == "POST" and len(seg) == 1:
            body = req.json()
            fields = {"data", "id", "delay", "at", "max_attempts", "priority", "timeout"}
            if not isinstance(body, dict) or set(body) - fields:
                raise InvalidArgument(f"the body must be a JSON object of {', '.join(sorted(fields))}")
            job_id = client.enqueue(
                db,
                job_type,
                body.get("data"),
                id=body.get("id"),
                delay=body.get("delay"),
                at=body.get("at"),
                max_attempts=body.get("max_attempts"),
                priority=body.get("priority"),
                timeout=body.get("timeout"),
            )
            return 201, {"ok": True, "id": job_id}
        if req.method == "POST" and len(seg) == 2 and seg[1] in ("_pause", "_resume"):
            was = (client.pause if seg[1] == "_pause" else client.resume)(db, job_type)
            return 200, {"ok": True, "paused": seg[1] == "_pause", "was_paused": was}
        if req.method == "DELETE" and len(seg) == 2:
            api.remove(db, job_type, seg[1])
            return 200, {"ok": True}
        if req.method == "POST" and len(seg) == 3 and seg[2] == "_retry":
            retry(db, job_type, seg[1], error)
            return 201, {"ok": True, "id": seg[1]}
    except NoTypeTimeout:
        raise error(404, "not_found", f"no job type {job_type!r} (a type has an activity timeout)") from None
    except NotFound as exc:
        raise error(404, "not_found", exc.message) from None
    except (InvalidArgument, EncodingError) as exc:
        raise error(400, "bad_request", exc.message) from None
    raise error(404, "not_found", "missing")


def retry(db: Any, job_type: str, job_id: str, error: Callable[..., Exception]) -> None:
    """Put a finished (or failed) job back with its data and a fresh attempt count.

    Raises:
        NotFound: no such job.
        the ``error(409, ...)``: the job is not finished.
    """
    from actors.workers import client
    from fdblayer.jobs.exceptions import NotFound

    view = overview.job_view(db, DEFAULT_LAYOUT, job_type, job_id)
    if view is None:
        raise NotFound(f"no job {job_id!r} of type {job_type!r}")
    if view["state"] != "finished":
        raise error(409, "conflict", f"job {job_id!r} is {view['state']}: only a finished job is retried")
    client.enqueue(
        db,
        job_type,
        view["data"],
        id=job_id,
        max_attempts=view["max_attempts"],
        priority=view.get("priority") or 0,
        timeout=view.get("time_limit"),
    )


def job_action(
    db: Any, job_type: str, job_id: str, action: str, was: str | None, error: Callable[..., Exception]
) -> None:
    """The status page's buttons: ``_retry`` (:func:`retry`) or ``_cancel``
    (remove the job: a running handler sees ``ctx.stopping``). ``was``:
    ``finished`` or ``unfinished``, the job's state on the page that posted;
    a job that finished since is not removed by a cancel (409).

    Raises:
        the ``error(...)``: 404 for no such job or type, 409 for a job in the wrong state.
    """
    from fdblayer.jobs import api
    from fdblayer.jobs.exceptions import InvalidArgument, NotFound, NoTypeTimeout

    if reserved(job_type):
        raise error(403, "forbidden", reserved(job_type))
    if activity.get_type_timeout(db, DEFAULT_LAYOUT, job_type) is None:
        raise error(404, "not_found", f"no job type {job_type!r} (a type has an activity timeout)")
    try:
        if action == "_retry":
            retry(db, job_type, job_id, error)
            return
        view = overview.job_view(db, DEFAULT_LAYOUT, job_type, job_id)
        if view is None:
            raise NotFound(f"no job {job_id!r} of type {job_type!r}")
        if was == "unfinished" and view["state"] == "finished":
            raise error(409, "conflict", f"job {job_id!r} finished before it was cancelled: nothing removed")
        api.remove(db, job_type, job_id)
    except (NotFound, NoTypeTimeout):
        raise error(404, "not_found", f"no job {job_id!r} of type {job_type!r}") from None
    except InvalidArgument as exc:
        raise error(400, "bad_request", exc.message) from None


def reserved(job_type: str) -> str | None:
    """Why the HTTP API and the status page's buttons may not write jobs of
    ``job_type`` (None: they may)."""
    from fdblayer.docs import DOCS_TYPE

    if job_type == DOCS_TYPE:  # a document's ownership: its job comes and goes with the document
        return (
            f"the jobs of {DOCS_TYPE!r} are the nodes' hold on the _replicator documents: "
            "change or delete the document instead"
        )
    return None


def job_view(db: Any, job_type: str, job_id: str) -> dict | None:
    """One job whole (``overview.job_view``), or None when it or its type does not exist."""
    if not job_type or activity.get_type_timeout(db, DEFAULT_LAYOUT, job_type) is None:
        return None
    return overview.job_view(db, DEFAULT_LAYOUT, job_type, job_id)


def hosts_status(db: Any, now: float) -> list[dict]:
    """The worker hosts' last beats (``hosts.list_hosts``)."""
    return hosts.list_hosts(db, DEFAULT_LAYOUT, now)


def queue_status(db: Any, now: float) -> dict:
    """The queue as the status page shows it (``overview.queue_status``)."""
    return overview.queue_status(db, DEFAULT_LAYOUT, now)


def workers_route(
    req: Any, seg: list[str], store: Callable[[], Any], error: Callable[..., Exception]
) -> tuple[int, Any]:
    """Answer a GET or HEAD of ``/_workers``."""
    if seg:
        raise error(404, "not_found", "missing")
    return 200, {"hosts": hosts.list_hosts(store(), DEFAULT_LAYOUT, time.time())}


def _page_params(query: Mapping[str, list[str]], error: Callable[..., Exception]) -> tuple[Any, int, int]:
    state = query.get("state", [None])[-1]
    if state is not None and state not in overview.STATES:
        raise error(400, "bad_request", f"state must be one of {', '.join(overview.STATES)}, not {state[:40]!r}")
    limit = _int(query, "limit", DEFAULT_LIMIT, MAX_LIMIT, error)
    skip = _int(query, "skip", 0, 10**9, error)
    return state, limit, skip


def _int(query: Mapping[str, list[str]], name: str, default: int, top: int, error: Callable[..., Exception]) -> int:
    values = query.get(name)
    if not values:
        return default
    raw = values[-1]
    try:
        value = int(raw)
    except ValueError:
        raise error(400, "bad_request", f"{name} must be an integer, not {raw[:40]!r}") from None
    if not 0 <= value <= top:
        raise error(400, "bad_request", f"{name} must be between 0 and {top}, not {value}")
    return value


def _jsonable_type(entry: dict) -> dict:
    """A type (a str, or a tuple from the Python API) as JSON shows it."""
    job_type = entry["type"]
    return dict(entry, type=job_type if isinstance(job_type, (str, int)) else list(job_type))
