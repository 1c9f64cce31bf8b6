"""gen_server-style actors on Thespian, with OTP exit semantics.

Subclass :class:`GenServer` and implement the callbacks ``init(args)``,
``handle_call(msg, from_)`` (its return value is the reply; return
``NOREPLY`` and call :meth:`GenServer.reply` later to defer it),
``handle_cast(msg)``, ``handle_info(msg)`` and ``terminate(reason)``.

What a caller can rely on:

* An unknown call, cast or info message makes the actor exit with
  :class:`~supervision.exceptions.BadCall` / ``BadCast`` / ``BadInfo``.
* An exception in any callback makes the actor exit with that exception as
  its reason: no retry, no PoisonMessage. A caller waiting on the call gets
  :class:`~supervision.exceptions.CallFailed`, and so does every caller whose
  call was deferred (``NOREPLY``) and not yet answered when the actor exits,
  whatever the reason (as an Erlang caller's monitor reports it).
* On exit the actor runs ``terminate(reason)``, then sends ``Exit`` to its
  parent and linked actors and ``Down`` to its monitors, then stops.
* An actor killed without a word (SIGKILL) is reported by its parent on its
  behalf with reason ``killed``; the kernel kills an actor whose parent
  process dies (PR_SET_PDEATHSIG), so no orphan outlives its supervisor.
* Timers (:meth:`GenServer.send_after`) run on the actor's clock and can be
  cancelled; on a manual clock they fire when an ``AdvanceClock`` arrives.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import uuid
from dataclasses import replace
from typing import Any, Callable

from thespian.actors import (
    Actor,
    ActorExitRequest,
    ChildActorExited,
    DeadEnvelope,
    PoisonMessage,
    ThespianWatch,
    WakeupMessage,
    WatchMessage,
)

from . import messages as m
from .addrmap import AddrMap, AddrSet
from .clock import Clock, make_clock
from .child_deaths import LOST_EXIT_GRACE, ChildDeaths
from .exceptions import BadCall, BadCast, BadInfo
from .logs import log_directly
from .reasons import KILLED, NOPROC, NORMAL, SHUTDOWN, is_normal, portable
from .procs import die_with_parent as die_with_parent  # noqa: F401 - re-exported
from .procs import die_on_faults, install_fork_hygiene, pid_alive, signal_process, start_time
from .reports import report
from .owner import ignore_stop_signals
from .calls import Calls, From as From, Request as Request  # noqa: F401 - From and Request re-exported
from .timers import MAX_TIMER_STEP as MAX_TIMER_STEP, Timers  # noqa: F401 - MAX_TIMER_STEP re-exported

log = logging.getLogger(__name__)

IGNORE = "ignore"
NOREPLY = object()
#: Returned by ``init`` of an actor that finishes starting later by calling
#: :meth:`GenServer.start_complete` or :meth:`GenServer.start_failed`.
DEFER_START = object()


def adopt_actor_logging() -> None:
    """Route loggers created before the fork to Thespian's forwarding root.

    Thespian replaces ``logging.root`` in each actor process; loggers that
    already existed still point at the old root and would print to the
    starter's stderr instead of the node's log.
    """
    root = logging.root
    old_manager = getattr(log, "manager", None)  # Thespian swapped the class-level manager
    if old_manager is None or old_manager is logging.Logger.manager:
        return
    for logger in list(old_manager.loggerDict.values()):
        parent = getattr(logger, "parent", None)
        if isinstance(logger, logging.Logger) and parent is not None and parent.name == "root" and parent is not root:
            logger.parent = root


class GenServer(Calls, Timers, ChildDeaths, Actor):  # type: ignore[misc]  # Actor: thespian has no types
    """A supervised actor with gen_server callbacks. See the module docstring."""

    #: Trap exit signals from linked actors (receive them as ``Exit`` messages).
    trap_exit: bool = False

    # ----------------------------------------------------------- callbacks
    def init(self, args: Any) -> Any:
        """Set up state. Return ``IGNORE`` to not start; raise to fail the start."""
        return None

    def handle_call(self, msg: Any, from_: From) -> Any:
        """Answer a call. The default crashes with ``bad_call``."""
        raise BadCall(msg)

    def handle_cast(self, msg: Any) -> None:
        """Handle a cast. The default crashes with ``bad_cast``."""
        raise BadCast(msg)

    def handle_info(self, msg: Any) -> None:
        """Handle any other message. The default crashes with ``bad_info``."""
        raise BadInfo(msg)

    def terminate(self, reason: Any) -> None:
        """Clean up before exiting with ``reason``."""

    def format_status(self) -> dict[str, Any]:
        """State shown in crash reports; override to redact."""
        return {}

    # ------------------------------------------------------------ plumbing
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Thespian builds the actor in its new process before any message:
        # die with the parent from here, not from Init, which a parent killed
        # right after the fork never sends (the child would live on, orphaned).
        parent = multiprocessing.parent_process()
        if parent is not None:  # a forked actor process, not a class instantiated in a test
            die_with_parent(parent.pid)
            install_fork_hygiene()  # its children will not hold each other's pipes
            ignore_stop_signals()  # the node's owner stops the node
            die_on_faults()  # a segfault kills it (Thespian's handler would spin it for ever)
            log_directly()  # not through Thespian's logger: a burst would block this actor
        self._started = False
        self._exiting = False
        self._stash: list[tuple[Any, Any]] = []
        self.parent: Any = None
        self.node: Any = None
        self.name: str | None = None
        self.clock: Clock = Clock()
        self._links = AddrSet()
        self._monitors: dict[str, Any] = {}
        self._my_monitors: dict[str, Any] = {}
        self._children = AddrMap()
        self._exit_reasons = AddrMap()
        self._init_timers()
        self._init_calls()
        self._stop_reason: Any = None
        self._starter: Any = None
        self._fd_watches: dict[int, Callable[[], object]] = {}
        self._deaths = None  # a DeathWatch once a child has started (ChildDeaths)

    def receiveMessage(self, msg: Any, sender: Any) -> Any:  # noqa: N802 - Thespian API
        """Thespian entry point: routes messages; never lets an exception escape."""
        if self._exiting:
            self._after_exit(msg)
            return None
        try:
            self._route(msg, sender)
            if self._stop_reason is not None:
                self._exit(self._stop_reason)
        except Exception as exc:  # noqa: BLE001 - the actor boundary: crash with the reason
            self._crash(exc, msg)
        if self._fd_watches and not self._exiting:
            return ThespianWatch(list(self._fd_watches))
        return None

    def watch_fd(self, fd: int, callback: Callable[[], object]) -> None:
        """Run ``callback`` (inside this actor, its result ignored) whenever ``fd`` is readable.

        This is how an actor waits on something outside Thespian (a store
        watch signalling a pipe) without blocking its message loop.
        """
        self._fd_watches[fd] = callback

    def unwatch_fd(self, fd: int) -> None:
        """Stop watching ``fd``."""
        self._fd_watches.pop(fd, None)

    def _on_fds_ready(self, ready: list[int]) -> None:
        for fd in ready:
            callback = self._fd_watches.get(fd)
            if callback is not None:
                callback()

    def _route(self, msg: Any, sender: Any) -> None:
        if isinstance(msg, ActorExitRequest):
            self._exit(SHUTDOWN, thespian_exiting=True)
        elif isinstance(msg, ChildActorExited):
            self._on_exit_notice(msg.childAddress, sender)
            self._check_silent_children()
        elif isinstance(msg, WakeupMessage):
            self._on_wakeup(msg.payload)
        elif isinstance(msg, WatchMessage):
            self._on_fds_ready(msg.ready)
        elif isinstance(msg, m.Init):
            self._on_init(msg if msg.starter is not None else replace(msg, starter=sender))
        elif isinstance(msg, (PoisonMessage, DeadEnvelope)):
            self._on_undeliverable(msg)
        elif not self._started and type(msg) not in _EARLY:
            self._stash.append((msg, sender))
        else:
            if isinstance(msg, m.Call) and msg.reply_to is None:
                msg = replace(msg, reply_to=sender)
            self._dispatch(msg, sender)

    def _dispatch(self, msg: Any, sender: Any) -> None:
        handler = _SYSTEM.get(type(msg))
        if handler is not None:
            getattr(self, handler)(msg)
        else:
            self.handle_info(msg)

    # ---------------------------------------------------------- handshake
    def _on_init(self, init: m.Init) -> None:
        adopt_actor_logging()
        self.parent, self.node, self.name = init.parent, init.node, init.name
        self.clock = make_clock(init.clock)
        if init.link_parent and init.parent is not None:
            self._links.add(init.parent)
        self._starter = init.starter
        try:
            result = self.init(init.args)
        except Exception as exc:  # noqa: BLE001 - init failure is a start error
            self._fail_start(init, exc)
            return
        if result is DEFER_START:
            return
        if isinstance(result, str) and result == IGNORE:
            self._exiting = True
            self.send(init.starter, m.Ignored(self.myAddress))
            self._end_process()
            return
        self.start_complete()

    def start_complete(self) -> None:
        """Tell the starter this actor is up, then handle what waited for it."""
        self._started = True
        self.send(self._starter, m.Started(self.myAddress, os.getpid()))
        stash, self._stash = self._stash, []
        for msg, sender in stash:
            self.receiveMessage(msg, sender)

    def start_failed(self, reason: Any) -> None:
        """Tell the starter this actor could not start, and exit."""
        self._exiting = True
        reason = portable(reason)
        report("start_error", logging.ERROR, actor=type(self).__name__, name=self.name, reason=reason)
        self.send(self._starter, m.StartFailed(self.myAddress, reason))
        self._end_process()

    def _fail_start(self, init: m.Init, exc: Exception) -> None:
        self.start_failed(exc)

    # -------------------------------------------------------------- calls
    def _on_call(self, call: m.Call) -> None:
        from_ = From(call.ref, call.reply_to)
        # Open while the handler runs: a handler that answers (``reply``) before
        # it returns NOREPLY has closed it, and its caller hears nothing more.
        self._open_calls[from_.ref] = from_
        try:
            if isinstance(call.msg, m.GetPid):
                result: Any = os.getpid()
            else:
                result = self.handle_call(call.msg, from_)
        except Exception as exc:
            self._open_calls.pop(from_.ref, None)
            self.send(from_.reply_to, m.CallError(from_.ref, self.myAddress, portable(exc)))
            raise
        if result is not NOREPLY:
            self.reply(from_, result)
        elif from_.ref in self._open_calls:  # deferred: answered later, or told of this actor's exit
            self._cap_open_calls()

    def _on_cast(self, cast: m.Cast) -> None:
        self.handle_cast(cast.msg)

    # -------------------------------------------------- links and monitors
    def link(self, addr: Any) -> None:
        """Link to ``addr``: a non-normal exit of either ends the other (unless trapped)."""
        if addr == self.myAddress or addr in self._links:
            return
        self._links.add(addr)
        self.send(addr, m.LinkRequest(self.myAddress))
        self._tell_parent_watchers()

    def unlink(self, addr: Any) -> None:
        """Remove a link (both directions)."""
        if addr in self._links:
            self._links.discard(addr)
            self.send(addr, m.UnlinkRequest(self.myAddress))
            self._tell_parent_watchers()

    def monitor(self, addr: Any) -> str:
        """Monitor ``addr``: one ``Down(ref, addr, reason)`` arrives when it exits
        (reason ``noproc`` if it is already dead). Returns the ref."""
        ref = uuid.uuid4().hex
        self._my_monitors[ref] = addr
        self.send(addr, m.MonitorRequest(ref, self.myAddress))
        return ref

    def demonitor(self, ref: str) -> None:
        """Cancel a monitor; no Down for it is delivered afterwards."""
        addr = self._my_monitors.pop(ref, None)
        if addr is not None:
            self.send(addr, m.DemonitorRequest(ref))

    def _on_link_request(self, req: m.LinkRequest) -> None:
        self._links.add(req.addr)
        self._tell_parent_watchers()

    def _on_unlink_request(self, req: m.UnlinkRequest) -> None:
        self._links.discard(req.addr)
        self._tell_parent_watchers()

    def _on_monitor_request(self, req: m.MonitorRequest) -> None:
        self._monitors[req.ref] = req.watcher
        self._tell_parent_watchers()

    def _on_demonitor_request(self, req: m.DemonitorRequest) -> None:
        if self._monitors.pop(req.ref, None) is not None:
            self._tell_parent_watchers()

    def _on_down(self, down: m.Down) -> None:
        if self._my_monitors.pop(down.ref, None) is not None:
            self.handle_info(down)

    def _tell_parent_watchers(self) -> None:
        if self.parent is not None:
            links = tuple(a for a in self._links if a != self.parent)
            monitors = tuple(self._monitors.items())
            self.send(self.parent, m.Watchers(self.myAddress, links, monitors))

    def _on_watchers(self, w: m.Watchers) -> None:
        child = self._children.get(w.addr if w.via is None else w.via)
        if child is None:
            return
        if w.via is None:
            child["watchers"] = w
        elif w.links or w.monitors:
            child["descendants"][w.addr] = w
        else:
            child["descendants"].pop(w.addr, None)
        if self.parent is not None:
            self.send(self.parent, replace(w, via=self.myAddress))

    def _on_exit_signal(self, sig: m.Exit) -> None:
        if sig.addr in self._children:
            # The child sends Exit as its last act: handle its exit now rather
            # than when Thespian reports the process gone (tens of ms later).
            self._exit_reasons[sig.addr] = sig.reason
            self._on_child_actor_exited(sig.addr)
            return
        if sig.addr not in self._links and sig.addr != self.parent:
            if self.trap_exit:
                self.handle_info(sig)
            return
        self._links.discard(sig.addr)
        if sig.addr == self.parent:
            self.stop(sig.reason)
        elif self.trap_exit:
            self.handle_info(sig)
        elif sig.reason != NORMAL:
            self.stop(sig.reason)

    # ------------------------------------------------------------ children
    def spawn_link(self, cls: type | str, args: Any = None, *, name: str | None = None, clock: Any = None) -> Any:
        """Start a linked child actor; returns its address at once.

        The child's ``Started`` arrives later (see :meth:`child_started`);
        its exit arrives as an exit signal (an ``Exit`` message when this
        actor traps exits).
        """
        addr = self._create_child(cls, args, name=name, clock=clock)
        self._links.add(addr)
        return addr

    def _create_child(self, cls: type | str, args: Any, *, name: str | None = None, clock: Any = None) -> Any:
        if isinstance(cls, str):
            from .childspec import resolve_class

            cls = resolve_class(cls)
        addr = self.createActor(cls)
        self._children[addr] = {"pid": None, "watchers": None, "descendants": AddrMap()}
        self.send(addr, m.Init(args, self.myAddress, self.myAddress, self.node, name, clock))
        return addr

    def child_started(self, addr: Any, pid: int) -> None:
        """Hook: a child created by this actor answered Started."""

    def child_exited(self, addr: Any, reason: Any) -> None:
        """Hook: a child created by this actor is gone. Default: treat it as an exit signal."""
        if addr in self._links:
            self._links.discard(addr)
            if reason == IGNORE:
                return
            if self.trap_exit:
                self.handle_info(m.Exit(addr, reason))
            elif reason != NORMAL:
                self.stop(reason)

    def _on_started(self, msg: m.Started) -> None:
        child = self._children.get(msg.addr)
        if child is not None:
            child["pid"] = msg.pid
            child["start"] = start_time(msg.pid)  # a later kill_child signals this process only
            self._watch_death(msg.addr, child)
            self.child_started(msg.addr, msg.pid)

    def _on_start_failed(self, msg: m.StartFailed) -> None:
        if msg.addr in self._children:
            self._exit_reasons[msg.addr] = msg.reason
            self._exit_if_gone(msg.addr)

    def _on_ignored(self, msg: m.Ignored) -> None:
        if msg.addr in self._children:
            self._exit_reasons[msg.addr] = IGNORE
            self._exit_if_gone(msg.addr)

    def _on_exit_notice(self, addr: Any, sender: Any) -> None:
        """Thespian says a child is gone: the child's own goodbye, or this
        process's SIGCHLD check.

        Thespian sends the goodbye after the child's last messages, but each
        message on a connection of its own, so the goodbye can overtake the
        child's ``Exit`` (or ``StartFailed``): a child that said goodbye has
        sent one, and its reason is waited for (``LOST_EXIT_GRACE`` at most,
        then ``killed``), not taken to be ``killed`` at once. A child that
        vanished without a goodbye (SIGKILL) is handled at once."""
        child = self._children.get(addr)
        if child is None:
            return  # Thespian reports each exit twice; the second is a duplicate.
        if addr not in self._exit_reasons and (sender == addr or child.get("gone")):
            if not child.get("gone"):
                child["gone"] = True
                self.start_timer(LOST_EXIT_GRACE, lambda: self._exit_overdue(addr), real=True)
            return
        self._on_child_actor_exited(addr)

    def _exit_if_gone(self, addr: Any) -> None:
        """A gone child's reason arrived after its goodbye: its exit now."""
        child = self._children.get(addr)
        if child is not None and child.get("gone"):
            self._on_child_actor_exited(addr)

    def _exit_overdue(self, addr: Any) -> None:
        if addr in self._children:
            log.warning("child_exit_reason_lost child=%s taken_as=killed", addr)
            self._on_child_actor_exited(addr)

    def _on_child_actor_exited(self, addr: Any) -> None:
        child = self._children.pop(addr, None)
        if child is None:
            return  # Thespian reports each exit twice; the second is a duplicate.
        if self._deaths is not None:
            self._deaths.forget(child.get("pidfd"), addr)
        reason = self._exit_reasons.pop(addr, KILLED)
        if reason == KILLED:
            self._notify_for_dead_child(addr, child)
        self._withdraw_watchers(addr, child)
        self.child_exited(addr, reason)

    def _notify_for_dead_child(self, addr: Any, child: dict[str, Any]) -> None:
        """Send the Exit/Down a SIGKILLed child (and its subtree, which the
        kernel killed with it) could not send."""
        entries = [child["watchers"]] if child.get("watchers") is not None else []
        entries += [w for _, w in child["descendants"].items()]
        for w in entries:
            for link in w.links:
                self.send(link, m.Exit(w.addr, KILLED))
            for ref, watcher in w.monitors:
                self.send(watcher, m.Down(ref, w.addr, KILLED))

    def _withdraw_watchers(self, addr: Any, child: dict[str, Any]) -> None:
        """Tell the ancestors to forget the watchers of a gone subtree."""
        if self.parent is None:
            return
        gone = ([addr] if child.get("watchers") is not None else []) + list(child["descendants"])
        for dead in gone:
            self.send(self.parent, m.Watchers(dead, via=self.myAddress))

    def kill_child(self, addr: Any) -> bool:
        """SIGKILL a child's process (brutal_kill). False if its pid is unknown.

        Only the process that answered Started is signalled (its pid and start
        time, through a pidfd): never one that took its number since."""
        child = self._children.get(addr)
        pid = child and child.get("pid")
        if not pid:
            return False
        signal_process(pid, child.get("start"), signal.SIGKILL)
        return True

    # ---------------------------------------------------------------- exit
    def stop(self, reason: Any = NORMAL) -> None:
        """Exit with ``reason`` once the current handler returns."""
        self._stop_reason = reason if reason is not None else NORMAL

    def _on_shutdown(self, msg: m.Shutdown) -> None:
        self.stop(msg.reason)

    def _on_exit_request(self, msg: m.ExitRequest) -> None:
        """``exit(Pid, Reason)``: trapped, it is an ``Exit`` message; else
        any reason but ``normal`` ends the actor with it."""
        if self.trap_exit:
            self.handle_info(m.Exit(msg.sender, msg.reason))
        elif msg.reason != NORMAL:
            self.stop(msg.reason)

    def _crash(self, exc: Exception, msg: Any) -> None:
        report(
            "crash",
            logging.ERROR,
            actor=type(self).__name__,
            name=self.name,
            reason=exc,
            last_message=msg,
            state=self._safe_status(),
        )
        self._exit(portable(exc), logged=True)

    def _safe_status(self) -> Any:
        try:
            return self.format_status()
        except Exception as exc:  # noqa: BLE001 - a report must not crash the crash path
            return f"<format_status failed: {exc!r}>"

    def _exit(self, reason: Any, thespian_exiting: bool = False, logged: bool = False) -> None:
        """Run terminate, tell parent, links and monitors, then stop the actor."""
        if self._exiting:
            return
        self._exiting = True
        try:
            self.terminate(reason)
        except Exception as exc:  # noqa: BLE001 - terminate failing changes the reason
            report("terminate_error", logging.ERROR, actor=type(self).__name__, reason=exc)
            reason = exc
        reason = portable(reason)
        if not self._started and self._starter is not None:
            self.send(self._starter, m.StartFailed(self.myAddress, reason))
        if not logged and not is_normal(reason) and self._started:
            report("crash", logging.ERROR, actor=type(self).__name__, name=self.name, reason=reason)
        self._announce_exit(reason)
        if not thespian_exiting:
            self._end_process()

    def _end_process(self) -> None:
        """Ask Thespian to end this actor's process.

        Thespian keeps its own list of children, pruned only by the exit
        notices it receives, and it loses some (see
        ``_watch_death``). A recursive exit request makes it send
        an exit request to each child on that list and wait for their
        notices; for children already dead it waits forever (its error
        callback closes over the loop variable, so only the last one is ever
        struck off). So the request is recursive only while a child of ours
        is still alive: a supervisor that has stopped its children in order
        ends at once. A child left alive without it still dies with this
        process (``die_with_parent``).
        """
        live = any(pid_alive(child.get("pid")) for _, child in self._children.items())
        self.send(self.myAddress, ActorExitRequest(recursive=live))

    def _announce_exit(self, reason: Any) -> None:
        if not self._started:
            return
        me = self.myAddress
        targets = AddrSet(self._links)
        if self.parent is not None:
            targets.add(self.parent)
        for addr in targets:
            self.send(addr, m.Exit(me, reason))
        for ref, watcher in self._monitors.items():
            self.send(watcher, m.Down(ref, me, reason))
        self._fail_open_calls(reason)

    def _after_exit(self, msg: Any) -> None:
        """Messages reaching an exiting actor: requests get noproc answers."""
        if isinstance(msg, m.Call):
            self.send(msg.reply_to, m.CallError(msg.ref, self.myAddress, NOPROC))
        elif isinstance(msg, m.MonitorRequest):
            self.send(msg.watcher, m.Down(msg.ref, self.myAddress, NOPROC))
        elif isinstance(msg, m.LinkRequest):
            self.send(msg.addr, m.Exit(self.myAddress, NOPROC))

    def _on_undeliverable(self, msg: Any) -> None:
        log.debug("undeliverable actor=%s message=%.200r", type(self).__name__, msg)


#: System messages and the method that handles each (by name, so subclasses
#: such as Supervisor can override a handler).
_SYSTEM: dict[type, str] = {
    m.Call: "_on_call",
    m.Cast: "_on_cast",
    m.Reply: "_on_reply",
    m.CallError: "_on_call_error",
    m.Exit: "_on_exit_signal",
    m.Down: "_on_down",
    m.LinkRequest: "_on_link_request",
    m.UnlinkRequest: "_on_unlink_request",
    m.MonitorRequest: "_on_monitor_request",
    m.DemonitorRequest: "_on_demonitor_request",
    m.Watchers: "_on_watchers",
    m.Started: "_on_started",
    m.StartFailed: "_on_start_failed",
    m.Ignored: "_on_ignored",
    m.Shutdown: "_on_shutdown",
    m.ExitRequest: "_on_exit_request",
    m.AdvanceClock: "_on_advance_clock",
}

#: Messages handled even before init has completed (a supervisor starting its
#: children must see their answers); everything else waits in a stash.
_EARLY = frozenset(
    {m.Started, m.StartFailed, m.Ignored, m.Exit, m.Watchers, m.Reply, m.CallError, m.Shutdown, m.AdvanceClock}
)
