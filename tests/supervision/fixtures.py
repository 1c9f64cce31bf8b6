"""Actors used by the supervision tests (importable by the node's processes).

``Worker`` records its lifecycle in a shared event log file so a test can
observe start and stop order across processes: each line is
``<event> <child id>``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from supervision import IGNORE, NOREPLY, Exit, GenServer, Supervisor
from supervision.messages import Down, GetPid


def record(path: str | None, line: str) -> None:
    """Append one line to the event log (atomic for short lines)."""
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class Unprintable:
    """An object whose ``str`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


class Worker(GenServer):
    """A worker: answers pings, crashes on demand, logs start/terminate.

    args: dict with ``id``, ``log`` (event file), optional ``fail_init``
    (raise in init), ``ignore`` (return IGNORE), ``slow_stop`` (seconds to
    sleep in terminate), ``trap`` (trap exits).
    """

    def init(self, args: Any) -> Any:
        args = args or {}
        self.args = args
        self.ident = args.get("id", "w")
        self.trap_exit = bool(args.get("trap"))
        self.events: list = []
        if args.get("fail_init"):
            raise RuntimeError("init failed on purpose")
        if args.get("ignore"):
            record(args.get("log"), f"ignore {self.ident}")
            return IGNORE
        record(args.get("log"), f"start {self.ident}")
        return None

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if msg == "ping":
            return "pong"
        if msg == "log_bad_args":  # records whose arguments do not format, then one that does
            burst = logging.getLogger("supervision.burst")
            burst.warning("value %s", Unprintable())
            burst.warning("count %d", "x")
            burst.warning("after")
            return os.getpid()
        if isinstance(msg, tuple) and msg[0] == "log_burst":  # one warning record per line, in this process
            for i in range(msg[1]):
                logging.getLogger("supervision.burst").warning("burst line %d of %d", i, msg[1])
            return os.getpid()
        if msg == "pid":
            return os.getpid()
        if msg == "crash":
            raise ValueError("crash on purpose")
        if msg == "events":
            return list(self.events)
        if isinstance(msg, tuple) and msg[0] == "stop":
            self.stop(msg[1])
            return "stopping"
        if isinstance(msg, tuple) and msg[0] == "link":
            self.link(msg[1])
            return "linked"
        if isinstance(msg, tuple) and msg[0] == "monitor":
            return self.monitor(msg[1])
        if isinstance(msg, tuple) and msg[0] == "spawn_link":
            return self.spawn_link(Worker, msg[1])
        if isinstance(msg, tuple) and msg[0] == "timer":
            return self.send_after(msg[1], ("timer_fired", msg[2]))
        if isinstance(msg, tuple) and msg[0] == "cancel":
            return self.cancel_timer(msg[1])
        if msg == "defer":
            self.deferred = from_
            return NOREPLY
        if msg == "answer_now":  # answered before the handler returns NOREPLY, as a supervisor's ops are
            self.reply(from_, "early")
            return NOREPLY
        if msg == "open_calls":
            return sum(1 for ref in self._open_calls if ref != from_.ref)  # this call is open while it runs
        if msg == "has_deferred":
            return getattr(self, "deferred", None) is not None
        if msg == "release":
            self.reply(self.deferred, "released")
            return "ok"
        return super().handle_call(msg, from_)

    def handle_cast(self, msg: Any) -> None:
        if msg == "noop":
            return
        if isinstance(msg, tuple) and msg[0] == "log_long":  # (_, count, size, tag): long warning records
            _, count, size, tag = msg
            for i in range(count):
                logging.getLogger("supervision.long").warning("%s %d %s %s end", tag, i, tag * size, tag)
            return
        super().handle_cast(msg)

    def handle_info(self, msg: Any) -> None:
        if isinstance(msg, (Exit, Down)) or (isinstance(msg, tuple) and msg[0] == "timer_fired"):
            self.events.append(msg)
            return
        super().handle_info(msg)

    def terminate(self, reason: Any) -> None:
        slow = self.args.get("slow_stop")
        if slow:
            time.sleep(slow)
        record(self.args.get("log"), f"stop {self.ident}")


class Sup(Supervisor):
    """A supervisor whose flags and specs come from args (nested supervisors)."""

    def init(self, args: Any) -> Any:
        record(args.get("log"), f"start {args.get('id', 'sup')}")
        self.ident = args.get("id", "sup")
        self.log_path = args.get("log")
        return super().init(args)

    def children(self, args: Any) -> tuple:
        return args["flags"], args["specs"]

    def terminate(self, reason: Any) -> None:
        record(self.log_path, f"stop {self.ident}")


class KillingSup(Sup):
    """A Sup that, while it handles the exit of its first child, SIGKILLs
    every other child and waits for them to die: Thespian then strikes them
    off its process list without ever reporting their exits (its notice
    bookkeeping runs after the actor's handler), as happens by chance when a
    pool stops many children at once."""

    def init(self, args: Any) -> Any:
        self.killed_others = False
        return super().init(args)

    def child_exited(self, addr: Any, reason: Any) -> None:
        if not self.killed_others:
            self.killed_others = True
            import signal

            from supervision.procs import pid_alive

            killed = [child["pid"] for other, child in self._children.items() if other != addr and child.get("pid")]
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while any(pid_alive(pid) for pid in killed) and time.monotonic() < deadline:
                time.sleep(0.005)  # dead before this handler returns to Thespian's bookkeeping
        super().child_exited(addr, reason)


class DeafSup(Sup):
    """A Sup that never hears Thespian's exit notices (``ChildActorExited``):
    Thespian's loss of one, made certain. Its children's deaths reach it
    only from the kernel."""

    def _route(self, msg: Any, sender: Any) -> None:
        from thespian.actors import ChildActorExited

        if not isinstance(msg, ChildActorExited):  # every one dropped, and the checks it would start
            super()._route(msg, sender)


class Probe(Worker):
    """A Worker that sets up links and monitors synchronously, and spawns
    manual-clock children.

    Extra calls (besides Worker's):

    * ``("monitor_sync", addr)``: monitor ``addr``, answer the ref once
      ``addr`` has seen the request (a GetPid round trip behind it, or the
      dead-letter answer for a dead ``addr``).
    * ``("link_sync", addr)``: link to ``addr``, answer once it has seen it.
    * ``("spawn_manual", args)``: spawn_link a Worker on a manual clock,
      answer its address once it is started.
    """

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if isinstance(msg, tuple) and msg[0] in ("monitor_sync", "link_sync"):
            target = msg[1]
            if msg[0] == "monitor_sync":
                result = self.monitor(target)
            else:
                self.link(target)
                result = "linked"
            self.call_async(target, GetPid(), lambda _value, _err: self.reply(from_, result), timeout=5.0)
            return NOREPLY
        if isinstance(msg, tuple) and msg[0] == "spawn_manual":
            self.spawn_reply = from_
            self.spawn_link(Worker, msg[1], clock="manual")
            return NOREPLY
        return super().handle_call(msg, from_)

    def child_started(self, addr: Any, pid: int) -> None:
        waiting = getattr(self, "spawn_reply", None)
        if waiting is not None:
            self.spawn_reply = None
            self.reply(waiting, addr)


class Leaker(Worker):
    """A Worker that starts a process in a session of its own (out of the
    node's process group) and never stops it: a leak for the test kit."""

    def init(self, args: Any) -> Any:
        import subprocess

        subprocess.Popen(["sleep", "120"], start_new_session=True)
        return super().init(args)
