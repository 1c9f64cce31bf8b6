"""The wire protocol between supervised actors (all plain picklable data).

Start handshake: the starter creates the actor and sends :class:`Init`; the
actor answers :class:`Started`, :class:`Ignored` or :class:`StartFailed`
(Thespian's createActor does not fail when ``__init__`` does, so this
handshake is the only reliable signal). Requests carry ``reply_to`` so that
a message returned as a dead letter can still be answered with ``noproc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Init:
    """Start an actor: run its ``init(args)`` and answer ``starter``."""

    args: Any
    parent: Any
    starter: Any
    node: Any = None
    name: str | None = None
    clock: Any = None
    link_parent: bool = True


@dataclass(frozen=True)
class Started:
    """The actor is up; ``pid`` is its OS process."""

    addr: Any
    pid: int


@dataclass(frozen=True)
class Ignored:
    """The actor's init returned ``IGNORE``: it exits and is not a child."""

    addr: Any


@dataclass(frozen=True)
class StartFailed:
    """The actor's init raised or returned an error; ``reason`` says why."""

    addr: Any
    reason: Any


@dataclass(frozen=True)
class Call:
    """A request expecting one :class:`Reply` (or :class:`CallError`) with ``ref``."""

    ref: str
    msg: Any
    reply_to: Any


@dataclass(frozen=True)
class Reply:
    """The answer to the :class:`Call` with the same ``ref``."""

    ref: str
    value: Any


@dataclass(frozen=True)
class Failure:
    """A reply value meaning "the request failed with ``error``": callers raise it."""

    error: Exception


@dataclass(frozen=True)
class CallError:
    """The call failed: the server exited (``reason``) or does not exist (``noproc``)."""

    ref: str
    target: Any
    reason: Any


@dataclass(frozen=True)
class Cast:
    """A request with no reply."""

    msg: Any


@dataclass(frozen=True)
class Exit:
    """An exit signal: ``addr`` exited (or asks the receiver to exit) with ``reason``.

    Delivered as a message to actors that trap exits.
    """

    addr: Any
    reason: Any


@dataclass(frozen=True)
class Down:
    """The monitored actor ``addr`` exited with ``reason``."""

    ref: str
    addr: Any
    reason: Any


@dataclass(frozen=True)
class LinkRequest:
    """Link the receiver to ``addr`` (both directions)."""

    addr: Any


@dataclass(frozen=True)
class UnlinkRequest:
    """Remove the link between the receiver and ``addr``."""

    addr: Any


@dataclass(frozen=True)
class MonitorRequest:
    """Deliver one :class:`Down` with ``ref`` to ``watcher`` when the receiver exits."""

    ref: str
    watcher: Any


@dataclass(frozen=True)
class DemonitorRequest:
    """Cancel the monitor ``ref``."""

    ref: str


@dataclass(frozen=True)
class Watchers:
    """Up the tree: who must be told if ``addr`` dies without a word (SIGKILL).

    An actor sends its own to its parent; every actor forwards what it
    receives to its parent with ``via`` set to itself, so each ancestor
    knows the watchers of its whole subtree, keyed by the child it came
    through. Empty ``links`` and ``monitors`` withdraw the entry.
    """

    addr: Any
    links: tuple[Any, ...] = ()
    monitors: tuple[Any, ...] = ()
    via: Any = None


@dataclass(frozen=True)
class Shutdown:
    """Supervisor to child: run ``terminate(reason)`` and exit with ``reason``."""

    reason: Any = "shutdown"


@dataclass(frozen=True)
class ExitRequest:
    """``erlang:exit/2`` from outside: exit with ``reason`` (an actor that
    traps exits gets an :class:`Exit` from ``sender`` instead; ``normal`` is
    then the only reason that does nothing to one that does not)."""

    reason: Any
    sender: Any = None


@dataclass(frozen=True)
class AdvanceClock:
    """Move a manual clock forward and fire the timers that fall due."""

    seconds: float
    reply_to: Any = None


@dataclass(frozen=True)
class ClockAdvanced:
    """Answer to :class:`AdvanceClock` once due timers have run."""

    now: float


@dataclass(frozen=True)
class TimerFired:
    """Payload of a Thespian wakeup carrying a timer token."""

    token: int


@dataclass(frozen=True)
class Relay:
    """External client to node: forward ``message`` to ``target``.

    A plain process's send to a dying actor can block for tens of seconds in
    Thespian's transport; an actor's send never blocks, and a dead target's
    letter comes back to the node, which answers requests with ``noproc``.
    """

    target: Any
    message: Any


@dataclass(frozen=True)
class GetPid:
    """Ask an actor for its OS pid (answered with a :class:`Reply`)."""


@dataclass(frozen=True)
class Register:
    """Register ``name`` for ``addr`` (a node call)."""

    name: str
    addr: Any
    pid: int | None = None


@dataclass(frozen=True)
class Unregister:
    """Remove ``name`` if it still names ``addr`` (a node cast)."""

    name: str
    addr: Any = None


@dataclass(frozen=True)
class WhereIs:
    """Look ``name`` up (a node call): the address or None."""

    name: str


@dataclass
class Pending:
    """Bookkeeping of an in-actor asynchronous call (not sent on the wire)."""

    callback: Any
    target: Any
    timer: Any = None
