"""``_node/_local/_prometheus`` and the queue part of ``_stats``: the
scheduler's metrics and the queue's, per job type.

Principle: the exposition format is written by ``prometheus_client`` (its
escaping, ``_total`` suffixes, histogram buckets), from a collector that
reads the values at each scrape: the scheduler's counters and gauges (its
``stats()`` call) and, per job type, the store's counters
(``fdblayer.jobs.counts``), which every process touching the queue keeps
up to date, so one node's scrape shows the whole store's queue.

* ``couchdb_couch_replicator_jobs_*``: the seed's names, as before, plus the
  ``avg_pending``, ``avg_running`` and ``avg_crashed`` gauges.
* ``otpjobs_jobs{type, state}``: jobs by state (``claimed``: held by a worker
  host, handler not started; ``running``: handler running; ``scheduled`` is the part
  of ``pending`` not yet due).
* ``otpjobs_job_events_total{type, event}``: jobs added, attempts started,
  outcomes (succeeded, failed_final, retried), re-enqueued.
* ``otpjobs_job_run_seconds{type}``: histogram of the pools' handler calls.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from fdblayer.jobs import counts, overview
from fdblayer.jobs.keys import DEFAULT_LAYOUT

__all__ = ["prometheus_text", "queue_stats"]

#: The seed's metrics: (stats key, also the metric's name suffix; kind; help).
SCHEDULER_METRICS = (
    ("adds", "counter", "number of jobs added to replicator scheduler"),
    ("removes", "counter", "number of jobs removed from replicator scheduler"),
    ("starts", "counter", "number of jobs started by replicator scheduler"),
    ("stops", "counter", "number of jobs stopped by replicator scheduler"),
    ("crashes", "counter", "number of job crashed noticed by replicator scheduler"),
    ("total", "gauge", "total number of replication jobs"),
    ("running", "gauge", "replicator scheduler running jobs"),
    ("pending", "gauge", "replicator scheduler pending jobs"),
    ("crashed", "gauge", "replicator scheduler crashed jobs"),
    ("avg_pending", "gauge", "average age in seconds of pending jobs"),
    ("avg_running", "gauge", "average age in seconds of running jobs"),
    ("avg_crashed", "gauge", "average age in seconds of crashed jobs"),
)
STATES = ("pending", "scheduled", "claimed", "running", "finished", "failed")


class _Collector:
    """Reads the values at each scrape (see the module docstring)."""

    def __init__(self, stats: Mapping[str, Any], queue: list[dict]) -> None:
        self.stats, self.queue = stats, queue

    def collect(self) -> Iterable[Any]:
        for key, kind, desc in SCHEDULER_METRICS:
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            yield family(f"couchdb_couch_replicator_jobs_{key}", desc, value=float(self.stats.get(key, 0) or 0))
        yield GaugeMetricFamily(
            "couchdb_couch_replicator_scheduler_last_reschedule_ms",
            "duration of the last reschedule in milliseconds",
            value=float(self.stats.get("last_reschedule_ms", 0.0) or 0.0),
        )
        jobs = GaugeMetricFamily("otpjobs_jobs", "queue jobs by type and state", labels=["type", "state"])
        events = CounterMetricFamily("otpjobs_job_events", "queue job events by type", labels=["type", "event"])
        runs = HistogramMetricFamily(
            "otpjobs_job_run_seconds", "run time of the worker pools' handler calls", labels=["type"]
        )
        for entry in self.queue:
            label = str(entry["type"])
            for state in STATES:
                jobs.add_metric([label, state], entry[state])
            for event in counts.EVENTS:
                events.add_metric([label, event], entry["events"][event])
            run = entry["events"]["run"]
            buckets = [("+Inf" if bound == float("inf") else repr(bound), n) for bound, n in run["buckets"]]
            runs.add_metric([label], buckets, run["sum"])
        yield jobs
        yield events
        yield runs


def queue_stats(db: Any, now: Callable[[], float] = time.time) -> list[dict]:
    """Every type's counts and event counters (a few keys per type)."""
    out = []
    for entry in overview.types_overview(db, DEFAULT_LAYOUT, now()):
        entry["events"] = counts.read_events(db, DEFAULT_LAYOUT, entry["type"])
        out.append(entry)
    return out


def prometheus_text(stats: Mapping[str, Any], queue: list[dict]) -> str:
    """The exposition text (format 0.0.4) of the scheduler's ``stats`` and the queue's ``queue_stats``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(stats, queue))
    return generate_latest(registry).decode()
