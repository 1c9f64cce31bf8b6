"""The public API of the durable job queue (the seed's couch_jobs module).

Job creation and processing are store transactions that any process can
run with a database handle (``fdblayer.open(url)``) or inside a transaction
of its own; no actor sits on that path:

    add(tx, type, job_id, data, scheduled_time=0)     remove(tx, type, job_id)
    get_job_data(tx, type, job_id)                    get_job_state(tx, type, job_id)
    accept(db, type, *, timeout=None, max_sched_time=None, no_schedule=False) -> (job, data)
    update(tx, job, data=None) -> job                 finish(tx, job, data=None)
    resubmit(tx, job, scheduled_time=None) -> job     is_resubmitted(job)
    set_type_timeout(db, type, seconds)               clear_type_timeout(db, type)
    get_type_timeout(db, type)

Subscriptions need a running node (its notifiers watch the store):
:func:`subscribe` returns ``(subscription, state, data)``, or
``(None, JobState.FINISHED, data)`` for a finished job; :func:`wait` returns
the next ``(type, id, state, data)`` event of one or many subscriptions
(optionally only events of one state), or None on timeout;
:func:`unsubscribe` ends a subscription and drops its undelivered events.
The node is found by its admin port: the ``node`` argument (a port or a
:class:`supervision.Client`), else ``$OTPJOBS_PORT``, else 1900. Inside an
actor, use :func:`subscribe_task` with ``GenServer.run_task``; events then
arrive in ``handle_info`` as :class:`~actors.queue.protocol.JobEvent`.

Errors (all subclasses of :class:`JobsError`): ``NotFound``, ``Halt``,
``NoTypeTimeout``, ``EncodingError``, ``InvalidArgument``.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from fdblayer.jobs import (
    EncodingError,
    Halt,
    InvalidArgument,
    Job,
    JobInfo,
    JobsError,
    JobState,
    NoTypeTimeout,
    NotFound,
    accept,
    add,
    add_many,
    clear_type_timeout,
    finish,
    get_job,
    get_job_data,
    get_job_state,
    get_jobs,
    get_type_timeout,
    get_types,
    is_resubmitted,
    remove,
    resubmit,
    set_type_timeout,
    update,
)
from fdblayer.jobs.validate import LONGEST_WAIT, check_timeout
from supervision import Client, NoProc, Request, connect
from supervision.messages import WhereIs

from actors.names import JOBS_SERVER
from actors.queue.protocol import EventsRead, GetNotifierServer, JobEvent, Subscribe, Unsubscribe

__all__ = [
    "EncodingError",
    "Halt",
    "InvalidArgument",
    "Job",
    "JobInfo",
    "JobState",
    "JobsError",
    "NoTypeTimeout",
    "NotFound",
    "Subscription",
    "accept",
    "add",
    "add_many",
    "clear_type_timeout",
    "finish",
    "get_job",
    "get_job_data",
    "get_job_state",
    "get_jobs",
    "get_type_timeout",
    "get_types",
    "is_resubmitted",
    "remove",
    "resubmit",
    "set_type_timeout",
    "subscribe",
    "subscribe_task",
    "unsubscribe",
    "update",
    "wait",
]

DEFAULT_PORT = 1900


@dataclass(frozen=True)
class Subscription:
    """A subscription to one job's state changes (pass it to wait/unsubscribe)."""

    ref: str
    type: Any
    id: str
    notifier: Any
    port: int | None = None


class _Inbox:
    """One private endpoint per process and node receiving job events.

    A daemon thread reads the endpoint all the time and tells each notifier
    what it read (:class:`EventsRead`), so this process never holds up a
    notifier, even while nobody waits. Events of subscriptions nobody is
    waiting on are kept, in order, until a wait asks for them or their
    subscription ends.
    """

    def __init__(self, client: Client) -> None:
        from thespian.actors import ExternalContext

        self.client = client
        self.ctx = ExternalContext(client.system._systemBase.external_clone())  # noqa: SLF001
        self.address = self.ctx._systemBase.transport.myAddress  # noqa: SLF001
        self.kept: collections.deque = collections.deque()
        self.cv = threading.Condition()
        self.thread = threading.Thread(target=self._read, name="otpjobs-inbox", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        """The reader thread: keep every event, confirm them to their notifiers in batches."""
        while True:
            try:
                event = self.ctx.listen(3600.0)
                read: dict[str, list] = {}
                for _ in range(READ_BATCH):
                    if event is None:
                        break
                    self._keep(event, read)
                    event = self.ctx.listen(0.0)
                else:
                    self._keep(event, read)
                for notifier, count in read.values():
                    self.ctx.tell(notifier, EventsRead(self.address, count))
            except Exception:  # noqa: BLE001 - the endpoint is gone (the process is exiting)
                return

    def _keep(self, event: Any, read: dict) -> None:
        if not isinstance(event, JobEvent):
            return
        with self.cv:
            self.kept.append(event)
            self.cv.notify_all()
        if event.notifier is not None:
            read.setdefault(str(event.notifier), [event.notifier, 0])[1] += 1

    def next_event(self, refs: set[str], state: str | None, timeout: float | None) -> JobEvent | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cv:
            while True:
                for event in list(self.kept):
                    if event.ref in refs:
                        self.kept.remove(event)
                        if state is None or event.state == state:
                            return event
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self.cv.wait(3600.0 if left is None else min(left, 3600.0))

    def flush(self, ref: str) -> None:
        """Drop the undelivered events of ``ref`` (those already here, and
        those arriving in the next few milliseconds)."""
        deadline = time.monotonic() + FLUSH_WAIT
        with self.cv:
            while True:
                self.kept = collections.deque(e for e in self.kept if e.ref != ref)
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cv.wait(left)


#: Events the inbox reads before it confirms them (and keeps reading).
READ_BATCH = 64
#: Seconds ``unsubscribe`` keeps dropping its subscription's late events.
FLUSH_WAIT = 0.01

_clients: dict[tuple[int, int], Client] = {}
_inboxes: dict[tuple[int, int], _Inbox] = {}
#: Held while a client or an inbox is made: threads using a node for the first
#: time at once share one (two inboxes would split their events between them).
_making = threading.RLock()


def _port(node: Any) -> int:
    if isinstance(node, Client):
        return node.port
    if node is None:
        return int(os.environ.get("OTPJOBS_PORT", DEFAULT_PORT))
    if isinstance(node, bool) or not isinstance(node, int) or not 0 < node < 65536:
        raise InvalidArgument(f"node must be a TCP port (1-65535) or a supervision.Client, not {node!r}")
    return node


def _client(node: Any) -> Client:
    if isinstance(node, Client):
        return node
    key = (os.getpid(), _port(node))
    with _making:
        if key not in _clients:
            _clients[key] = connect(key[1])
        return _clients[key]


def _notifier(node: Any, job_type: Any, timeout: float) -> tuple[Client, Any]:
    """This process's client of the node and the type's notifier. A client
    kept from before the node restarted on its port knows only the old
    node's addresses (NoProc): it is replaced once by a new connection."""
    client = _client(node)
    try:
        return client, client.call(JOBS_SERVER, GetNotifierServer(job_type), timeout)
    except NoProc:
        if isinstance(node, Client):
            raise
        _clients.pop((os.getpid(), _port(node)), None)
        client = _client(node)
        return client, client.call(JOBS_SERVER, GetNotifierServer(job_type), timeout)


def _inbox(client: Client) -> _Inbox:
    key = (os.getpid(), client.port)
    with _making:
        if key not in _inboxes:
            _inboxes[key] = _Inbox(client)
        return _inboxes[key]


def _current(db: Any, job_type: Any, job_id: str) -> JobInfo:
    return get_job(db, job_type, job_id)


def subscribe(
    db: Any, type: Any, job_id: str, *, node: Any = None, timeout: float | None = 10.0
) -> tuple[Subscription | None, JobState, dict | None]:
    """Subscribe this process to a job's state changes.

    Returns:
        ``(subscription, state, data)`` as of now; for a finished job
        ``(None, JobState.FINISHED, data)`` (nothing more will happen); data
        is None if it is corrupt (reported).

    Raises:
        NotFound: no such job, or its type has no activity timeout.
        InvalidArgument: a malformed type or id.
        supervision.NodeDown: no node answers on the port.
    """
    timeout = check_timeout(timeout)
    if timeout is None:  # None, or a timeout of years: wait for the node as long as it takes
        timeout = LONGEST_WAIT
    _port(node)
    info = _current(db, type, job_id)
    if info.state is JobState.FINISHED:
        return None, info.state, info.data
    client, notifier = _notifier(node, type, timeout)
    inbox = _inbox(client)
    # one subscriber per thread: the threads of this process share its inbox
    msg = Subscribe(job_id, info.state.value, info.seq, inbox.address, confirms=True, thread=threading.get_ident())
    ref = client.call(notifier, msg, timeout)
    return Subscription(ref, type, job_id, notifier, client.port), info.state, info.data


def subscribe_task(actor: Any, db: Any, type: Any, job_id: str):
    """``subscribe`` for an actor: a task for ``actor.run_task(task, on_done)``.

    ``on_done`` gets ``(subscription, state, data)`` as :func:`subscribe`
    returns; events then reach ``actor.handle_info`` as JobEvent messages.
    """
    info = _current(db, type, job_id)
    if info.state is JobState.FINISHED:
        return None, info.state, info.data
    server = yield Request(actor.node, WhereIs(JOBS_SERVER))
    if server is None:
        raise NoProc(JOBS_SERVER)
    notifier = yield Request(server, GetNotifierServer(type))
    ref = yield Request(notifier, Subscribe(job_id, info.state.value, info.seq, actor.myAddress))
    return Subscription(ref, type, job_id, notifier), info.state, info.data


def unsubscribe(sub: Subscription, timeout: float = 10.0) -> None:
    """End a subscription and drop its events not yet received."""
    if not isinstance(sub, Subscription):
        raise InvalidArgument(f"not a subscription: {sub!r}")
    client = _client(sub.port)
    try:
        client.call(sub.notifier, Unsubscribe(sub.ref), timeout)
    except NoProc:
        pass  # the notifier is gone, and with it the subscription
    finally:
        _inbox(client).flush(sub.ref)


def _state_value(state: Any) -> str:
    try:
        return JobState(state).value
    except ValueError:
        allowed = ", ".join(s.value for s in JobState)
        raise InvalidArgument(f"state must be one of {allowed}, not {state!r}") from None


def wait(
    subs: Subscription | Iterable[Subscription], state: JobState | str | None = None, timeout: float | None = None
) -> tuple[Any, str, JobState | str, Any] | None:
    """Wait for the next event of one or many subscriptions.

    Args:
        subs: a subscription or a list of them (of the same node).
        state: only return an event of this state (other events of these
            subscriptions are dropped, as in the seed).
        timeout: seconds; None waits forever.

    Returns:
        ``(type, job_id, state, data)``, or None on timeout. ``state`` is a
        JobState, or the string ``"not_found"`` for a removed job.
    """
    if subs is None:
        raise InvalidArgument(
            "wait got None for a subscription: subscribe returns None for a job that "
            "had already finished (its state and data are final, nothing more will come)"
        )
    subs = [subs] if isinstance(subs, Subscription) else subs
    if not isinstance(subs, (list, tuple)) or not subs or not all(isinstance(s, Subscription) for s in subs):
        raise InvalidArgument(f"wait needs a subscription or a list of them, got {subs!r}")
    timeout = check_timeout(timeout)
    want = None if state is None else _state_value(state)
    inbox = _inbox(_client(subs[0].port))
    event = inbox.next_event({s.ref for s in subs}, want, timeout)
    if event is None:
        return None
    event_state = JobState(event.state) if event.state in JobState._value2member_map_ else event.state
    return event.type, event.id, event_state, event.data
