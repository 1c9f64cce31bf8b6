"""CouchDB-shaped views of the scheduler's data (``_scheduler``, ``_stats``).

Principle: pure functions from what the scheduler answers (its job dicts
and counters) to what CouchDB would answer, so the HTTP layer only routes
and the shapes can be checked without a server. Field names, types, sort
order, paging and the error wording follow CouchDB
(couch_replicator_httpd, couch_replicator_httpd_util); see PEERS.md A3.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

from actors.errors import ActorsError
from actors.http.metrics import SCHEDULER_METRICS

DEFAULT_LIMIT = 100
#: The fields of a ``_scheduler/jobs`` entry, in CouchDB's order.
JOB_FIELDS = ("id", "pid", "source", "target", "database", "user", "doc_id", "info", "history", "node", "start_time")

#: Top-level fields of an entry in the seed's client document (``Scheduler.list_jobs``), from ``info``.
SEQ_FIELDS = ("checkpointed_source_seq", "source_seq")
COUNT_FIELDS = (
    "revisions_checked",
    "missing_revisions_found",
    "docs_read",
    "docs_written",
    "doc_write_failures",
    "bulk_get_docs",
    "bulk_get_attempts",
)

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/@:]*):([^/@]*)@")


class QueryParseError(ActorsError, ValueError):
    """A bad query parameter; ``str()`` is CouchDB's reason."""


def mask_url(url: Any) -> Any:
    """A URL with its password replaced by ``*****`` (None stays None)."""
    if not isinstance(url, str):
        return url
    return _USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:*****@", url)


def job_view(job: Mapping[str, Any]) -> dict:
    """One scheduler job as a ``_scheduler/jobs`` entry."""
    out: dict[str, Any] = {name: job.get(name) for name in JOB_FIELDS}
    out["source"] = mask_url(out["source"])
    out["target"] = mask_url(out["target"])
    out["info"] = dict(out["info"] or {})
    out["history"] = list(out["history"] or [])
    # The top-level fields of the seed's client document, from the job's reported stats.
    out["continuous"] = bool(job.get("continuous"))
    for name in SEQ_FIELDS:
        out[name] = str(out["info"].get(name, 0))
    for name in COUNT_FIELDS:
        value = out["info"].get(name, 0)
        out[name] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return out


def jobs_params(query: Mapping[str, list[str]]) -> tuple[int, int]:
    """``(limit, skip)`` of ``_scheduler/jobs``, worded as CouchDB's jobs handler."""
    return _int_param(query, "limit", DEFAULT_LIMIT), _int_param(query, "skip", 0)


def _int_param(query: Mapping[str, list[str]], name: str, default: int) -> int:
    values = query.get(name)
    if not values:
        return default
    try:
        value = int(values[-1])
    except ValueError:
        raise QueryParseError(f"{name} must be an integer") from None
    if value < 0:
        raise QueryParseError(f"{name} not in range of [0,infinity]")
    return value


def docs_params(query: Mapping[str, list[str]]) -> tuple[int, int]:
    """``(limit, skip)`` of ``_scheduler/docs``, worded as CouchDB's docs handler."""
    out = []
    for name, default in (("limit", DEFAULT_LIMIT), ("skip", 0)):
        values = query.get(name)
        if not values:
            out.append(default)
            continue
        raw = values[-1]
        try:
            value = int(raw)
        except ValueError:
            raise QueryParseError(f'Invalid value for integer: "{raw}"') from None
        if value < 0:
            raise QueryParseError(f'Invalid value for positive integer: "{raw}"')
        out.append(value)
    return out[0], out[1]


#: The fields of a ``_scheduler/docs`` entry, in CouchDB's order.
DOC_FIELDS = (
    "database",
    "doc_id",
    "id",
    "node",
    "source",
    "target",
    "source_proxy",
    "target_proxy",
    "state",
    "info",
    "error_count",
    "last_updated",
    "start_time",
)
#: Doc states in the order CouchDB's replication_states() lists them.
DOC_STATES = ("initializing", "error", "running", "pending", "crashing", "completed", "failed")


def _endpoint_url(value: Any) -> Any:
    return value.get("url") if isinstance(value, Mapping) else value


def doc_view(doc: Any) -> dict:
    """One stored document (:class:`fdblayer.docs.Doc`) as a ``_scheduler/docs`` entry."""
    from actors.scheduler.core import iso8601

    body = doc.body or {}
    terminal = doc.state in ("completed", "failed")
    return {
        "database": doc.db_name,
        "doc_id": doc.doc_id,
        "id": None if terminal else doc.job_id,
        "node": doc.node,
        "source": mask_url(_endpoint_url(body.get("source"))),
        "target": mask_url(_endpoint_url(body.get("target"))),
        "source_proxy": None,
        "target_proxy": None,
        "state": doc.state,
        "info": doc.info,
        "error_count": doc.error_count,
        "last_updated": iso8601(doc.last_updated),
        "start_time": iso8601(doc.start_time),
    }


def docs_states(query: Mapping[str, list[str]]) -> list[str] | None:
    """The ``states=a,b`` filter of ``_scheduler/docs`` (None: every state)."""
    values = query.get("states")
    if not values:
        return None
    states = [s.strip().lower() for s in values[-1].split(",") if s.strip()]
    if not states or any(s not in DOC_STATES for s in states):
        raise QueryParseError(f"States must be one or more of [{','.join(DOC_STATES)}]")
    return states


def jobs_page_view(total: int, jobs: list[Mapping[str, Any]], skip: int) -> dict:
    """``jobs_page`` for a page the scheduler already cut (``total`` jobs in all)."""
    return {"total_rows": total, "offset": min(skip, total), "jobs": [job_view(j) for j in jobs]}


def docs_page(docs: list[Mapping[str, Any]], limit: int, skip: int) -> dict:
    """``{"total_rows", "offset", "docs"}`` (CouchDB gives offset = skip)."""
    ordered = sorted(docs, key=lambda d: (str(d.get("database")), str(d.get("doc_id"))))
    return {"total_rows": len(ordered), "offset": skip, "docs": ordered[skip : skip + limit]}


# ------------------------------------------------------------------ stats


#: (scheduler stat key, CouchDB metric name, type, description)
def stats_tree(stats: Mapping[str, Any], queue: list | None = None) -> dict:
    """The scheduler's stats as ``_node/_local/_stats`` answers them, and
    (``couch_jobs``) each queue type's counts and event counters."""
    jobs = {key: {"value": stats.get(key, 0), "type": kind, "desc": desc} for key, kind, desc in SCHEDULER_METRICS}
    tree = {
        "couch_replicator": {
            "jobs": jobs,
            "scheduler": {
                "last_reschedule_ms": {
                    "value": stats.get("last_reschedule_ms", 0.0),
                    "type": "gauge",
                    "desc": "duration of the last reschedule in milliseconds",
                }
            },
        }
    }
    if queue is not None:
        tree["couch_jobs"] = {str(entry["type"]): _queue_entry(entry) for entry in queue}
    return tree


def _queue_entry(entry: Mapping[str, Any]) -> dict:
    """One type's ``_stats`` leaf: gauges of each state, counters of each event."""
    out = {
        state: {"value": entry[state], "type": "gauge"}
        for state in ("pending", "scheduled", "running", "finished", "failed")
    }
    out.update(
        {event: {"value": value, "type": "counter"} for event, value in entry["events"].items() if event != "run"}
    )
    run = entry["events"]["run"]
    out["run_seconds"] = {"value": {"count": run["count"], "sum": run["sum"]}, "type": "histogram"}
    return out


def endpoint(value: Any) -> Any:
    """A replication endpoint as the scheduler takes it: a URL, or the ``url`` of an object."""
    return value.get("url") if isinstance(value, dict) else value


def replication_id(body: dict) -> str:
    """CouchDB-like: a hash of what the job copies, ``+continuous`` if it is."""
    key = {k: body.get(k) for k in ("source", "target", "handler", "options")}
    digest = hashlib.md5(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    return digest + ("+continuous" if body.get("continuous") is True else "")
