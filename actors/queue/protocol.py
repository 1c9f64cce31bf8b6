"""The queue's messages between its clients and its actors.

Plain frozen dataclasses, pickled across processes: the jobs server
answers :class:`GetNotifierServer` and :class:`ForceCheckTypes`, a
notifier answers :class:`Subscribe` and :class:`Unsubscribe` and sends
:class:`JobEvent` to subscribers. Clients import this module, never the
actors'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "EventsRead",
    "ForceCheckTypes",
    "GetNotifierServer",
    "JobEvent",
    "SubscriberGone",
    "Subscribe",
    "Unsubscribe",
]


@dataclass(frozen=True)
class GetNotifierServer:
    """Call: the notifier's address for ``type`` (Failure(NotFound) if none)."""

    type: Any


@dataclass(frozen=True)
class ForceCheckTypes:
    """Call: check the store's types now; answers ``ok`` when done."""


@dataclass(frozen=True)
class Subscribe:
    """Call: subscribe ``subscriber`` to ``job_id`` last seen in ``state``/``seq``."""

    job_id: str
    state: str
    seq: Any
    subscriber: Any
    #: The subscriber confirms what it read (:class:`EventsRead`): the
    #: notifier then keeps only a few of its events in flight, so that a
    #: subscriber that stops reading cannot hold up anyone else.
    confirms: bool = False
    #: The subscribing thread, when ``subscriber`` is a process's inbox
    #: (its threads share it; each of them is a subscriber of its own, as an
    #: Erlang process is); None for an actor. The calls of one subscriber
    #: and thread for one job share one ref, as couch_jobs' calls of one
    #: process do.
    thread: Any = None


@dataclass(frozen=True)
class Unsubscribe:
    """Call: end the subscription ``ref``."""

    ref: str


@dataclass(frozen=True)
class EventsRead:
    """Info to a notifier: ``subscriber`` has read ``count`` more of its events."""

    subscriber: Any
    count: int


@dataclass(frozen=True)
class SubscriberGone:
    """Info: the subscriber of ``ref`` could not be reached."""

    ref: str


@dataclass(frozen=True)
class JobEvent:
    """Sent to a subscriber: job ``id`` of ``type`` is now in ``state``."""

    ref: str
    type: Any
    id: str
    state: str
    data: Any
    notifier: Any = None

    def dead_letter(self) -> tuple[Any, Any] | None:
        """Where an undeliverable event is reported (the node calls this)."""
        return (self.notifier, SubscriberGone(self.ref)) if self.notifier is not None else None
