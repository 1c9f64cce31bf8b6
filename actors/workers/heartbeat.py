"""A worker host's heartbeat: its status, published in the store and answered on a call.

Principle: every :data:`fdblayer.jobs.hosts.BEAT` seconds the dispatcher
writes its host's status (workers, what runs and since when, counts) to the
store, where ``GET /_workers`` reads it; a clean stop removes it, a dead
host's ages out. A store error skips one beat and is logged; it never stops
the host. A mixin of the dispatcher, whose state it reads.
"""

from __future__ import annotations

import logging
import os
import time

from fdblayer.jobs import hosts
from fdblayer.jobs.keys import DEFAULT_LAYOUT

from actors.workers.state import DispatcherState

__all__ = ["Heartbeat"]

log = logging.getLogger("otpjobs.workers")


class Heartbeat(DispatcherState):
    """The heartbeat timer and the status of a dispatcher."""

    def _beat(self) -> None:
        """Publish this host's status in the store (``GET /_workers``)."""
        if not self.draining:
            try:
                hosts.beat(self.db, DEFAULT_LAYOUT, self.host, self._status(), time.time())
            except Exception as exc:  # noqa: BLE001 - a store hiccup skips a beat, never stops the host
                log.warning("beat_failed host=%s error=%r", self.host, exc)
            self.start_timer(hosts.BEAT, self._beat, real=True)

    # ---------------------------------------------------------------- status
    def _status(self) -> dict:
        now = time.time()
        running = [
            r
            for _, slot in self.slots.items()
            for r in ([slot.current] if slot.current else []) + list(slot.inflight.values())
        ]
        return {
            "host": self.host,
            "pid": os.getpid(),
            "concurrency": self.concurrency,
            "types": [str(t) for t in self.order],
            "workers": len(self.slots),
            "busy": len(running),
            "buffered": len(self.buffer),
            "claimed": len(self.buffer) + sum(len(slot.runs) for _, slot in self.slots.items()) - len(running),
            "draining": self.draining,
            "counts": dict(self.stats),
            "running": [
                {
                    "type": r.claimed.job.type,
                    "id": r.claimed.job.id,
                    "attempt": r.claimed.attempt,
                    "for": round(now - (r.started or now), 3),
                }
                for r in running
            ],
        }

    def format_status(self) -> dict:
        return {"host": self.host, "held": len(self._held()), "buffered": len(self.buffer)}
