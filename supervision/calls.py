"""Calls of a :class:`~supervision.gen_server.GenServer` (a mixin): calls
it makes without blocking (:meth:`Calls.call_async`, tasks of
:class:`Request` yields) and calls it answers later (``NOREPLY``, then
:meth:`Calls.reply`).

What a caller can rely on: every call made ends in exactly one callback
(the reply, or CallTimeout, CallFailed or NoProc); a caller whose call was
deferred and not yet answered when this actor exits gets ``CallFailed``
with the exit reason, as an Erlang caller's monitor reports it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from . import messages as m
from .exceptions import CallFailed, CallTimeout, NoProc
from .reasons import NOPROC

#: Deferred calls an actor remembers, to fail them with its exit reason.
MAX_OPEN_CALLS = 10000


@dataclass(frozen=True)
class From:
    """Who to answer for a call: pass it to :meth:`GenServer.reply`."""

    ref: str
    reply_to: Any


@dataclass(frozen=True)
class Request:
    """Yielded by a task (see :meth:`GenServer.run_task`): call ``target`` with
    ``msg``; the yield evaluates to the reply or raises the call's error."""

    target: Any
    msg: Any
    timeout: float = 5.0


class Calls:
    """The call methods of a GenServer (which supplies ``send``,
    ``myAddress``, ``start_timer`` and ``cancel_timer``)."""

    if TYPE_CHECKING:  # what the GenServer supplies, for the type checker
        myAddress: Any  # noqa: N815 - Thespian's name

        def send(self, target: Any, msg: Any) -> None: ...
        def start_timer(self, delay: float, callback: Callable[[], None], real: bool = False) -> int: ...
        def cancel_timer(self, token: int | None) -> bool: ...

    def _init_calls(self) -> None:
        self._pending_calls: dict[str, m.Pending] = {}  # calls made, awaiting their answer
        self._open_calls: dict[str, From] = {}  # deferred (NOREPLY) calls not yet answered

    def _cap_open_calls(self) -> None:
        """Keep at most :data:`MAX_OPEN_CALLS` deferred calls (callers told of
        this actor's exit, as an Erlang caller's monitor tells it): past
        that the oldest caller is left to its timeout."""
        while len(self._open_calls) > MAX_OPEN_CALLS:
            del self._open_calls[next(iter(self._open_calls))]

    def reply(self, from_: From, value: Any) -> None:
        """Answer the call identified by ``from_``."""
        self._open_calls.pop(from_.ref, None)
        self.send(from_.reply_to, m.Reply(from_.ref, value))

    def _fail_open_calls(self, reason: Any) -> None:
        """This actor exits: every deferred caller gets ``CallFailed(reason)``."""
        for from_ in self._open_calls.values():
            self.send(from_.reply_to, m.CallError(from_.ref, self.myAddress, reason))
        self._open_calls.clear()

    def call_async(
        self, target: Any, msg: Any, callback: Callable[[Any, Exception | None], None], timeout: float = 5.0
    ) -> str:
        """Call another actor without blocking this one.

        ``callback(value, None)`` runs with the reply, or
        ``callback(None, error)`` with CallTimeout, CallFailed or NoProc.
        Returns the call's ref.
        """
        ref = uuid.uuid4().hex
        pending = m.Pending(callback, target)
        pending.timer = self.start_timer(timeout, lambda: self._call_timed_out(ref, msg, timeout), real=True)
        self._pending_calls[ref] = pending
        self.send(target, m.Call(ref, msg, self.myAddress))
        return ref

    def run_task(self, gen: Any, on_done: Callable[[Any], None] | None = None) -> None:
        """Drive a generator that yields :class:`Request` objects.

        Each yield sends a call and suspends the generator until its reply
        (or error, raised inside the generator) arrives; meanwhile this actor
        handles other messages. ``on_done(result)`` runs with the generator's
        return value. An exception escaping the generator crashes the actor
        (callbacks run inside the actor's message handling).
        """
        self._task_step(gen, on_done, None, None)

    def _task_step(self, gen: Any, on_done: Any, value: Any, error: Exception | None) -> None:
        try:
            request = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            if on_done is not None:
                on_done(stop.value)
            return
        self.call_async(request.target, request.msg, lambda v, e: self._task_step(gen, on_done, v, e), request.timeout)

    def _call_timed_out(self, ref: str, msg: Any, timeout: float) -> None:
        pending = self._pending_calls.pop(ref, None)
        if pending is not None:
            pending.callback(None, CallTimeout(pending.target, msg, timeout))

    def _on_reply(self, reply: m.Reply) -> None:
        pending = self._pending_calls.pop(reply.ref, None)
        if pending is not None:
            self.cancel_timer(pending.timer)
            if isinstance(reply.value, m.Failure):
                pending.callback(None, reply.value.error)
            else:
                pending.callback(reply.value, None)

    def _on_call_error(self, err: m.CallError) -> None:
        pending = self._pending_calls.pop(err.ref, None)
        if pending is not None:
            self.cancel_timer(pending.timer)
            error = NoProc(err.target) if err.reason == NOPROC else CallFailed(err.target, err.reason)
            pending.callback(None, error)
