"""Jobs finished per minute, per type: what the status page's charts draw.

Principle: the store keeps per-type event counters that only grow
(``fdblayer.jobs.counts.read_events``: ``succeeded``, ``failed_final``...);
a rate is the difference of two readings. The HTTP process samples them
(:class:`Sampler`, one daemon thread, started by :mod:`actors.http.main`)
every :data:`INTERVAL` seconds from its start, and keeps in memory, per
type, the last :data:`POINTS` + 1 readings, for at most :data:`MAX_TYPES`
types (the first in key order, as the status page lists them): a few
kilobytes whatever the queue does. The page then shows
:data:`POINTS` differences: an hour of minutes. The history starts again
when the HTTP process does; each node samples for its own page.

One reading is one snapshot transaction of a few keys per type. A failed
reading is skipped (logged, at most once per :data:`LOG_EVERY` seconds):
the next difference then spans two intervals.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from typing import Any, Callable

log = logging.getLogger(__name__)

__all__ = ["INTERVAL", "POINTS", "MAX_TYPES", "Sampler", "read_counters"]

#: Seconds between two readings (the default; a node's tests use less).
INTERVAL = 60.0
#: Differences kept per type (with INTERVAL: the last hour).
POINTS = 60
#: Types sampled at most (the page's types table shows as many).
MAX_TYPES = 100
#: Seconds between two log lines about failed readings.
LOG_EVERY = 600.0


def read_counters(db: Any, max_types: int = MAX_TYPES) -> dict:
    """``{type: (succeeded, failed_final)}`` of the first ``max_types`` types, in one transaction."""
    from fdblayer.interface import transactional
    from fdblayer.jobs import activity, counts
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    @transactional
    def read(tr: Any) -> dict:
        out = {}
        for job_type in activity.get_types(tr, DEFAULT_LAYOUT)[:max_types]:
            events = counts.read_events(tr, DEFAULT_LAYOUT, job_type)
            out[job_type] = (events["succeeded"], events["failed_final"])
        return out

    return read(db)


class Sampler:
    """Readings of the counters, kept per type, and what they show.

    Args:
        read: returns ``{type: (succeeded, failed_final)}`` (e.g. :func:`read_counters`).
        interval: seconds between two readings.
        points: differences kept per type.
        max_types: types kept at most (more from ``read`` are ignored).
        clock: wall-clock seconds.
    """

    def __init__(
        self,
        read: Callable[[], dict],
        interval: float = INTERVAL,
        points: int = POINTS,
        max_types: int = MAX_TYPES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        self.read, self.interval, self.points, self.max_types, self.clock = read, interval, points, max_types, clock
        self._lock = threading.Lock()
        self._readings: dict[Any, deque] = {}
        self._taken = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._logged = float("-inf")

    def sample(self, now: float | None = None) -> bool:
        """Take one reading at ``now`` (default: the clock); False when the store did not answer."""
        now = self.clock() if now is None else now
        try:
            values = self.read()
        except Exception as exc:  # noqa: BLE001 - the store may be away a while: the next reading tries again
            if now - self._logged >= LOG_EVERY:
                self._logged = now
                log.warning("throughput_sample_failed error=%r", exc)
            return False
        with self._lock:
            kept: dict[Any, deque] = {}
            for job_type, (succeeded, failed) in list(values.items())[: self.max_types]:
                readings = self._readings.get(job_type) or deque(maxlen=self.points + 1)
                readings.append((now, int(succeeded), int(failed)))
                kept[job_type] = readings
            self._readings = kept  # a type gone from the store is dropped
            self._taken += 1
        return True

    def snapshot(self) -> dict:
        """What the page draws: ``{"interval", "points", "samples": readings taken,
        "series": {type: [(end time, succeeded, failed), ...]}}``, each entry the
        difference of two successive readings, oldest first, at most ``points``
        (a counter that went down, a store replaced, counts 0)."""
        with self._lock:
            readings = {t: list(r) for t, r in self._readings.items()}
            taken = self._taken
        series = {
            job_type: [(b[0], max(0, b[1] - a[1]), max(0, b[2] - a[2])) for a, b in itertools.pairwise(rows)]
            for job_type, rows in readings.items()
        }
        return {"interval": self.interval, "points": self.points, "samples": taken, "series": series}

    # ------------------------------------------------------------ the thread
    def start(self) -> "Sampler":
        """Read now, then every ``interval`` seconds, in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="throughput-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            due = max(due + self.interval, time.monotonic())  # a late reading does not bunch the next ones
            self._stop.wait(due - time.monotonic())
