"""OTP supervisors on GenServer.

Subclass :class:`Supervisor` and implement ``children(args)`` returning
``(SupFlags, [ChildSpec, ...])`` (dicts are accepted for both), or start a
plain :class:`Supervisor` with ``args=(flags, specs)``.

What a caller can rely on (OTP's supervisor semantics):

* Children start one at a time, in order, each after the previous one
  answered; the supervisor reports Started only when all have. A child whose
  init returns ``IGNORE`` is kept as a spec with no process. A child that
  fails to start makes the supervisor stop the ones already started (in
  reverse order) and fail its own start.
* Restart types: permanent children always restart, transient ones only
  after an abnormal exit, temporary ones never (and are forgotten).
* Strategies: one_for_one, one_for_all, rest_for_one, simple_one_for_one.
* More than ``intensity`` restarts within ``period`` seconds: the supervisor
  stops all children in reverse order and exits with reason ``shutdown``,
  and its own supervisor applies its strategy.
* Stopping a child: ``Shutdown`` then wait ``shutdown`` seconds then
  SIGKILL; or SIGKILL at once for ``brutal_kill``.
* One operation at a time (a restart, a start_child...): requests arriving
  meanwhile are served after it, in order.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Sequence

from thespian.actors import ActorExitRequest

from . import messages as m
from .childspec import (
    BRUTAL_KILL,
    INFINITY,
    ChildSpec,
    ChildType,
    Restart,
    Strategy,
    SupFlags,
    check_specs,
)
from .exceptions import AlreadyStarted, BadChildSpec, NoProc, StartError, SupervisionError
from .gen_server import DEFER_START, IGNORE, NOREPLY, From, GenServer
from .reasons import KILLED, SHUTDOWN, is_normal, portable
from .procs import pid_alive
from .reports import report

log = logging.getLogger(__name__)


#: Seconds between checks that a killed child's process is gone.
REAP_CHECK = 0.1

#: Seconds a child may take to answer its start before it is killed.
START_TIMEOUT = 30.0

# --- requests (supervisor calls) ---------------------------------------


@dataclass(frozen=True)
class StartChild:
    """Start a child: a ChildSpec/dict, or the args for simple_one_for_one."""

    spec_or_args: Any


@dataclass(frozen=True)
class TerminateChild:
    """Stop a child (by id, or by address for simple_one_for_one); keep its spec."""

    child: Any


@dataclass(frozen=True)
class RestartChild:
    """Start again a stopped child whose spec is kept."""

    child_id: Any


@dataclass(frozen=True)
class DeleteChild:
    """Forget the spec of a stopped child."""

    child_id: Any


@dataclass(frozen=True)
class WhichChildren:
    """List ``(id, address or None, type, start)`` per child, in start order."""


@dataclass(frozen=True)
class CountChildren:
    """Counts: specs, active, supervisors, workers."""


@dataclass(frozen=True)
class GetChildSpec:
    """The spec of a child as a dict."""

    child_id: Any


@dataclass(frozen=True)
class ChildInfo:
    """One row of which_children."""

    id: Any
    addr: Any
    type: str
    start: str
    pid: int | None = None


@dataclass
class _Kid:
    spec: ChildSpec
    addr: Any = None
    pid: int | None = None


@dataclass(frozen=True)
class _Wait:
    kind: str  # "start" or "exit"
    addr: Any


#: An operation: a generator that yields what it waits for and is sent
#: what came (see ``_step``); it may return a value (a request's answer).
_Steps = Generator[_Wait, Any, Any]


@dataclass
class _Op:
    gen: _Steps
    waiting: _Wait | None = None
    timers: list[int] = field(default_factory=list)


def add_restart(
    restarts: tuple[float, ...], now: float, intensity: int, period: float
) -> tuple[bool, tuple[float, ...]]:
    """The restart intensity rule of OTP's supervisor, pure.

    ``restarts`` are the times of the restarts still in the window, oldest
    first. Returns ``(allowed, restarts)``: the window with a restart at
    ``now`` added and those ``period`` or more seconds old dropped, and
    whether it holds at most ``intensity`` restarts (else the supervisor
    gives up: ``max_intensity``).
    """
    kept = tuple(t for t in restarts if now - t < period) + (now,)
    return len(kept) <= intensity, kept


@dataclass(frozen=True)
class ExitDecision:
    """What a supervisor does when a child exits: ``restart`` the children
    in it (terminated in reverse, then started in order; empty: none), or
    ``forget`` the child's spec (a temporary child, or a dynamic child that
    will not restart)."""

    restart: tuple[Any, ...] = ()
    forget: bool = False


def on_child_exit(
    strategy: Strategy, restart: Restart, reason: Any, children: Sequence[Any], child: Any, dynamic: bool = False
) -> ExitDecision:
    """OTP's supervisor rule for one child's exit, pure.

    ``children`` are the supervisor's children in start order, ``child``
    the one that exited with ``reason``; ``dynamic`` for a
    simple_one_for_one child. A permanent child always restarts, a
    transient one only after an abnormal exit (``normal``, ``shutdown`` and
    ``{shutdown, _}`` are normal), a temporary one never. The group
    restarted is the child (one_for_one, simple_one_for_one), every child
    (one_for_all) or the child and those started after it (rest_for_one).
    The restart intensity is :func:`add_restart`'s.
    """
    if restart is Restart.TEMPORARY or (restart is Restart.TRANSIENT and is_normal(reason)):
        return ExitDecision(forget=restart is Restart.TEMPORARY or dynamic)
    if strategy is Strategy.ONE_FOR_ALL:
        group = tuple(children)
    elif strategy is Strategy.REST_FOR_ONE:
        group = tuple(children[list(children).index(child) :])
    else:
        group = (child,)
    return ExitDecision(restart=group)


class Supervisor(GenServer):
    """A supervisor actor. See the module docstring."""

    trap_exit = True

    def children(self, args: Any) -> tuple[Any, list[Any]]:
        """Return ``(flags, specs)``; the default reads them from ``args``."""
        flags, specs = args
        return flags, specs

    # ------------------------------------------------------------ startup
    def init(self, args: Any) -> Any:
        flags, specs = self.children(args)
        self.flags = SupFlags.from_value(flags)
        specs = check_specs(self.flags, list(specs))
        self._template: ChildSpec | None = None
        self._kids: list[_Kid] = []
        if self.flags.strategy is Strategy.SIMPLE_ONE_FOR_ONE:
            self._template = specs[0]
        else:
            self._kids = [_Kid(s) for s in specs]
        self._restarts: tuple[float, ...] = ()
        self._op: _Op | None = None
        self._ops: collections.deque[_Steps] = collections.deque()
        self._backlog: collections.deque[tuple[str, tuple[Any, ...]]] = collections.deque()
        self._run(self._start_all())
        return DEFER_START

    def _start_all(self) -> _Steps:
        for kid in list(self._kids):
            ok, reason = yield from self._start_kid(kid)
            if not ok:
                yield from self._terminate_all()
                self.start_failed(("shutdown", ("failed_to_start_child", kid.spec.id, reason)))
                return
        self.start_complete()

    # ------------------------------------------------ operations machinery
    def _run(self, gen: _Steps, urgent: bool = False) -> None:
        """Queue an operation; operations run one at a time."""
        if urgent:
            self._ops.appendleft(gen)
        else:
            self._ops.append(gen)
        if self._op is None:
            self._next_op()

    def _next_op(self) -> None:
        while self._op is None and self._ops:
            self._op = _Op(self._ops.popleft())
            self._step(None)
        while self._op is None and self._backlog and not self._exiting:
            kind, payload = self._backlog.popleft()
            if kind == "exit":
                self._on_kid_exit(*payload)
            elif kind == "retry":
                self._run(self._start_group(*payload))
            else:
                GenServer._dispatch(self, *payload)

    def _step(self, value: Any) -> None:
        op = self._op
        assert op is not None
        for token in op.timers:
            self.cancel_timer(token)
        op.timers.clear()
        try:
            op.waiting = op.gen.send(value)
        except StopIteration:
            self._op = None
            if not self._exiting:
                self._next_op()
            return
        self._arm_wait(op)

    def _arm_wait(self, op: _Op) -> None:
        wait = op.waiting
        assert wait is not None  # _step just set it
        if wait.kind == "start":
            op.timers.append(self.start_timer(START_TIMEOUT, lambda: self._start_timed_out(wait.addr), real=True))

    def _start_timed_out(self, addr: Any) -> None:
        """A child that never answered its start: stop it and fail the start.

        Its pid is not known yet (it comes with Started), so it is asked to
        exit through Thespian; its late exit notice is then a duplicate.
        """
        if self._op and self._op.waiting == _Wait("start", addr):
            self.send(addr, ActorExitRequest())
            self._resume("start", addr, (False, "start_timeout"))

    def _resume(self, kind: str, addr: Any, value: Any) -> bool:
        op = self._op
        if op is not None and op.waiting == _Wait(kind, addr):
            op.waiting = None
            self._step(value)
            return True
        return False

    def _dispatch(self, msg: Any, sender: Any) -> None:
        if self._op is not None and isinstance(msg, (m.Call, m.Cast)):
            self._backlog.append(("msg", (msg, sender)))
        else:
            super()._dispatch(msg, sender)

    # ------------------------------------------------ child start and stop
    def _start_kid(self, kid: _Kid) -> Generator[_Wait, Any, tuple[bool, Any]]:
        """Start one child; returns (ok, reason). Ignore counts as ok."""
        try:
            addr = self._create_child(kid.spec.actor_class(), kid.spec.args, name=kid.spec.name, clock=kid.spec.clock)
        except (BadChildSpec, SupervisionError) as exc:
            return False, portable(exc)
        result = yield _Wait("start", addr)
        ok, detail = result
        if ok and detail == IGNORE:
            kid.addr = kid.pid = None
            report("child_ignored", supervisor=self.name, child=kid.spec.id)
            return True, None
        if not ok:
            report("start_error", logging.ERROR, supervisor=self.name, child=kid.spec.id, reason=detail)
            return False, detail
        kid.addr, kid.pid = addr, detail
        if kid.spec.name:
            self._register(kid)
        report("child_started", supervisor=self.name, child=kid.spec.id, pid=detail, restart=kid.spec.restart.value)
        return True, None

    def child_started(self, addr: Any, pid: int) -> None:
        self._resume("start", addr, (True, pid))

    def child_exited(self, addr: Any, reason: Any) -> None:
        if reason == IGNORE and self._resume("start", addr, (True, IGNORE)):
            return
        if self._resume("start", addr, (False, reason)):
            return
        if self._resume("exit", addr, reason):
            return
        if addr == self.parent:
            return
        self._backlog.append(("exit", (addr, reason)))
        if self._op is None:
            self._next_op()

    def _terminate_kid(self, kid: _Kid, reason: Any = SHUTDOWN) -> _Steps:
        """Stop one child (Shutdown, timeout, SIGKILL); waits for its exit."""
        addr = kid.addr
        if addr is None:
            return
        kid.addr = kid.pid = None
        self._unregister(kid, addr)
        if addr not in self._children:
            self._drop_backlogged_exit(addr)
            return
        shutdown = kid.spec.shutdown
        if shutdown == BRUTAL_KILL:
            self._kill_and_watch(addr)
        else:
            self.send(addr, m.Shutdown(reason))
            if shutdown != INFINITY:
                assert self._op is not None  # this runs as the current operation
                self._op.timers.append(self.start_timer(float(shutdown), lambda: self._kill_and_watch(addr), real=True))
        exit_reason = yield _Wait("exit", addr)
        expected = KILLED if shutdown == BRUTAL_KILL else reason
        if exit_reason != expected and not is_normal(exit_reason):
            report("shutdown_error", logging.ERROR, supervisor=self.name, child=kid.spec.id, reason=exit_reason)

    def _kill_and_watch(self, addr: Any) -> None:
        """SIGKILL a child, and do not rely on Thespian alone to report it:
        check its pid every 100 ms and treat a vanished process as exited."""
        child = self._children.get(addr)
        pid = child and child.get("pid")
        self.kill_child(addr)
        if pid:
            self.start_timer(REAP_CHECK, lambda: self._reap_check(addr, pid), real=True)

    def _reap_check(self, addr: Any, pid: int) -> None:
        if addr not in self._children:
            return
        if pid_alive(pid):
            self.start_timer(REAP_CHECK, lambda: self._reap_check(addr, pid), real=True)
        else:
            self._on_child_actor_exited(addr)

    def _drop_backlogged_exit(self, addr: Any) -> None:
        self._backlog = collections.deque(e for e in self._backlog if not (e[0] == "exit" and e[1][0] == addr))

    def _terminate_all(self) -> _Steps:
        for kid in reversed(list(self._kids)):
            yield from self._terminate_kid(kid)

    # --------------------------------------------------------- restarting
    def _find(self, addr: Any) -> _Kid | None:
        return next((k for k in self._kids if k.addr == addr and addr is not None), None)

    def _on_kid_exit(self, addr: Any, reason: Any) -> None:
        kid = self._find(addr)
        if kid is None:
            return
        self._unregister(kid, addr)
        kid.addr = kid.pid = None
        report(
            "child_exited",
            logging.DEBUG if is_normal(reason) else logging.ERROR,
            supervisor=self.name,
            child=kid.spec.id,
            reason=reason,
        )
        decision = on_child_exit(
            self.flags.strategy, kid.spec.restart, reason, self._kids, kid, dynamic=self._template is not None
        )
        if decision.forget:
            self._kids.remove(kid)
        if decision.restart:
            self._run(self._restart(kid, reason))

    def _add_restart(self) -> bool:
        """Record a restart (on this actor's clock); False if that goes over the intensity."""
        allowed, self._restarts = add_restart(
            self._restarts, self.clock.monotonic(), self.flags.intensity, self.flags.period
        )
        return allowed

    def _restart(self, kid: _Kid, reason: Any) -> _Steps:
        """Restart :func:`on_child_exit`'s group for ``kid``'s exit (as the
        children are when this operation runs), or give up past the intensity."""
        if not self._add_restart():
            report(
                "max_intensity",
                logging.ERROR,
                supervisor=self.name,
                child=kid.spec.id,
                intensity=self.flags.intensity,
                period=self.flags.period,
            )
            yield from self._terminate_all()
            self._exit(SHUTDOWN)
            return
        group = list(on_child_exit(self.flags.strategy, kid.spec.restart, reason, self._kids, kid).restart)
        for other in reversed(group):
            if other is not kid:
                yield from self._terminate_kid(other)
        yield from self._start_group(kid, group)

    def _start_group(self, kid: _Kid, group: list[_Kid]) -> _Steps:
        """Start again ``group`` in order (``kid`` is the child that exited).

        A start that fails counts as a restart and is tried again later, as
        OTP's ``try_again_restart``: queued behind the exits that arrived
        meanwhile, since it may have failed because a sibling died too
        (under rest_for_one, restarting that sibling restarts it anyway).
        Retrying on the spot would never see that exit: the start would fail
        for ever, slower than the restart intensity.
        """
        for index, member in enumerate(group):
            if member not in self._kids or member.addr is not None:
                continue  # gone, or started again meanwhile by an earlier sibling's restart
            if member is not kid and member.spec.restart is Restart.TEMPORARY:
                self._kids.remove(member)
                continue
            ok, reason = yield from self._start_kid(member)
            if not ok:
                if not self._add_restart():
                    report(
                        "max_intensity",
                        logging.ERROR,
                        supervisor=self.name,
                        child=member.spec.id,
                        intensity=self.flags.intensity,
                        period=self.flags.period,
                    )
                    yield from self._terminate_all()
                    self._exit(SHUTDOWN)
                    return
                self._backlog.append(("retry", (member, group[index:])))
                return
            report("child_restarted", supervisor=self.name, child=member.spec.id, pid=member.pid)

    # ----------------------------------------------------- shutting down
    def _on_shutdown(self, msg: m.Shutdown) -> None:
        self._run(self._shutdown(msg.reason), urgent=True)

    def _shutdown(self, reason: Any) -> _Steps:
        yield from self._terminate_all()
        self._exit(reason)

    def _on_exit_signal(self, sig: m.Exit) -> None:
        if sig.addr == self.parent and sig.addr not in self._children:
            self._run(self._shutdown(sig.reason), urgent=True)
        else:
            super()._on_exit_signal(sig)

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, m.Exit):
            return  # exits of non-children linked to us: nothing to do
        super().handle_info(msg)

    # ---------------------------------------------------------- API calls
    def handle_call(self, msg: Any, from_: From) -> Any:
        if isinstance(msg, WhichChildren):
            return self._which_children()
        if isinstance(msg, CountChildren):
            return self._count_children()
        if isinstance(msg, GetChildSpec):
            return self._kid_by_id(msg.child_id).spec.to_dict()
        ops: dict[type, Callable[[Any], _Steps]] = {
            StartChild: self._op_start_child,
            TerminateChild: self._op_terminate_child,
            RestartChild: self._op_restart_child,
            DeleteChild: self._op_delete_child,
        }
        op = ops.get(type(msg))
        if op is None:
            return super().handle_call(msg, from_)
        self._run(self._answering(from_, op(msg)))
        return NOREPLY

    def _answering(self, from_: From, gen: _Steps) -> _Steps:
        """Run a request's operation and reply with its result or error."""
        try:
            result = yield from gen
        except SupervisionError as exc:
            result = m.Failure(exc)
        self.reply(from_, result)

    def _kid_by_id(self, child_id: Any) -> _Kid:
        for kid in self._kids:
            if kid.spec.id == child_id or (self._template is not None and kid.addr == child_id):
                return kid
        raise NoProc(child_id)

    def _op_start_child(self, msg: StartChild) -> _Steps:
        if self._template is not None:
            spec = self._template.with_args(msg.spec_or_args)
            kid = _Kid(spec)
        else:
            spec = check_specs(self.flags, [msg.spec_or_args])[0]
            if any(k.spec.id == spec.id for k in self._kids):
                raise AlreadyStarted(f"child {spec.id!r} already exists")
            kid = _Kid(spec)
        self._kids.append(kid)
        ok, reason = yield from self._start_kid(kid)
        if not ok:
            self._kids.remove(kid)
            raise StartError(spec.id, reason)
        if kid.addr is None and self._template is not None:
            self._kids.remove(kid)
        return kid.addr

    def _op_terminate_child(self, msg: TerminateChild) -> _Steps:
        kid = self._kid_by_id(msg.child)
        yield from self._terminate_kid(kid)
        if self._template is not None or kid.spec.restart is Restart.TEMPORARY:
            self._kids.remove(kid)
        return True

    def _op_restart_child(self, msg: RestartChild) -> _Steps:
        if self._template is not None:
            raise SupervisionError("restart_child is not supported by simple_one_for_one")
        kid = self._kid_by_id(msg.child_id)
        if kid.addr is not None:
            raise AlreadyStarted(f"child {msg.child_id!r} is running")
        ok, reason = yield from self._start_kid(kid)
        if not ok:
            raise StartError(kid.spec.id, reason)
        return kid.addr

    def _op_delete_child(self, msg: DeleteChild) -> _Steps:
        if self._template is not None:
            raise SupervisionError("delete_child is not supported by simple_one_for_one")
        kid = self._kid_by_id(msg.child_id)
        if kid.addr is not None:
            raise AlreadyStarted(f"child {msg.child_id!r} is running")
        self._kids.remove(kid)
        return True
        yield  # pragma: no cover - makes this a generator

    def _which_children(self) -> list[ChildInfo]:
        return [
            ChildInfo(k.spec.id if self._template is None else None, k.addr, k.spec.type.value, k.spec.start, k.pid)
            for k in self._kids
        ]

    def _count_children(self) -> dict[str, int]:
        active = [k for k in self._kids if k.addr is not None]
        return {
            "specs": len(self._kids) if self._template is None else 1,
            "active": len(active),
            "supervisors": sum(k.spec.type is ChildType.SUPERVISOR for k in self._kids),
            "workers": sum(k.spec.type is ChildType.WORKER for k in self._kids),
        }

    # ------------------------------------------------------------ names
    def _register(self, kid: _Kid) -> None:
        if self.node is not None and kid.spec.name:
            self.send(self.node, m.Cast(m.Register(kid.spec.name, kid.addr, kid.pid)))

    def _unregister(self, kid: _Kid, addr: Any) -> None:
        if self.node is not None and kid.spec.name:
            self.send(self.node, m.Cast(m.Unregister(kid.spec.name, addr)))

    def format_status(self) -> dict[str, Any]:
        return {"flags": self.flags, "children": [k.spec.id for k in self._kids]}
