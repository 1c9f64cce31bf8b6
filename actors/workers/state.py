"""What a worker host's dispatcher holds, declared once for its parts.

The dispatcher (:mod:`actors.workers.dispatcher`) is one actor written as
a class and the mixins of its concepts (:mod:`~actors.workers.pool`,
:mod:`~actors.workers.leases`, :mod:`~actors.workers.heartbeat`,
:mod:`~actors.workers.pruning`, :mod:`~actors.workers.ticks`,
:mod:`~actors.workers.wakeups`, :mod:`~actors.workers.drain`,
:mod:`~actors.workers.attempts`, :mod:`~actors.workers.stepping`); its
decisions are pure functions of :mod:`~actors.workers.planner`.
:class:`DispatcherState` is the base of
each: it declares the state they share (set by ``Dispatcher.init``) and the
steps one part calls in another, so each part reads alone and a type
checker sees the whole. It holds no value and runs nothing: the
dispatcher's own methods come first in its method order.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Callable, Optional

from supervision import Down
from supervision.gen_server import GenServer

from actors.workers.runs import Running, Slot, TypeSlot

__all__ = ["DispatcherState"]


class DispatcherState(GenServer):
    """The dispatcher's shared state (declarations only) and cross-part steps."""

    store: str
    db: Any
    host: str
    host_key: str  #: names the journals of this host's workers (``journal.host_key``)
    concurrency: int
    backoff: tuple
    pool_name: str
    grace: float
    keep: Any
    types: dict[Any, TypeSlot]
    any_async: bool
    async_limit: int
    order: list
    pool: Any
    rundir: Any
    slots: Any  #: AddrMap: worker address -> Slot
    gone: Any  #: AddrMap: addresses of workers seen dead
    slot_count: int
    buffer: collections.deque
    outcomes: list
    building: list  #: the outcomes of the step built while the one in flight settles
    to_mark: dict
    tokens: int
    run_seconds: Optional[float]
    prefetch: int
    flush_queued: bool
    flight: Any  #: the step whose commit is in flight (``stepping.Flight``), or None
    watching_runs: bool
    draining: bool
    drain_from: Any
    drain_timer: Optional[int]
    workers_stopping: int
    superseded: dict
    stats: Any  #: a Counter of events, and step_ms a float sum of milliseconds
    renew_interval: float
    renew_timer: Optional[int]  #: the next renewal's timer
    renewed_at: float  #: when the last renewal began (monotonic)
    trimmed_at: float  #: when claimed jobs were last put back for a shrunk prefetch (monotonic)
    waker: Any  #: wakes the actor from the store's watch thread
    stepper: Any  #: a pipe to itself that runs one step (``_kick``)

    # the steps of the dispatcher itself that its parts call
    def _held(self) -> list:
        raise NotImplementedError

    def _kick(self) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        raise NotImplementedError

    def _settle(self) -> bool:
        raise NotImplementedError

    def _hand_out(self, idle_only: bool = False) -> None:
        raise NotImplementedError

    def _worker_down(self, down: Down) -> None:
        raise NotImplementedError

    def _give_back_type(self, job_type: Any) -> None:
        raise NotImplementedError

    def _lease_timeouts_seen(self) -> None:
        raise NotImplementedError

    def _renew_now(self) -> None:
        raise NotImplementedError

    def _wake_on(self, watch: Any, mark: Callable[[], None]) -> None:
        raise NotImplementedError

    def _read_schedules(self) -> None:
        raise NotImplementedError

    def _status(self) -> dict:
        raise NotImplementedError

    def _read_channel(self, slot: Slot) -> None:
        raise NotImplementedError

    def _tell(self, slot: Slot, msg: Any) -> None:
        raise NotImplementedError

    def _pool_cleared(self) -> None:
        raise NotImplementedError

    def _pool_started(self, started: int) -> None:
        raise NotImplementedError

    def _limit(self, running: Running) -> Optional[float]:
        raise NotImplementedError

    def _stopped_by_drain(self, running: Any, error: Optional[dict]) -> bool:
        raise NotImplementedError

    def _put_back(self, jobs: list, reason: str, level: int = logging.INFO) -> None:
        raise NotImplementedError
