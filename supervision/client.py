"""Talking to a node's actors from a plain Python process.

A :class:`Client` wraps an actor-system handle. Each call uses a private
endpoint and matches its reply by ref, so notifications or late replies can
never be mistaken for the answer. Every message goes through the node
supervisor (a ``Relay``): a plain process's send to a dying actor can block
for tens of seconds inside Thespian, an actor's send never blocks, and the
node answers a request to a dead actor with ``noproc``, so a call to a gone
actor raises :class:`~supervision.exceptions.NoProc` promptly. A call with
no answer raises :class:`~supervision.exceptions.CallTimeout`. Clients never
shut the actor system down.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

from . import loopback  # noqa: F401 - must patch Thespian before any ActorSystem
from . import messages as m
from .exceptions import CallFailed, CallTimeout, NoProc
from .reasons import NOPROC
from .supervisor import (
    ChildInfo,
    CountChildren,
    DeleteChild,
    GetChildSpec,
    RestartChild,
    StartChild,
    TerminateChild,
    WhichChildren,
)

NODE_NAME = "supervision.node"


def _own_address(ctx: Any) -> Any:
    """The address replies to this endpoint go to (None if Thespian hides it)."""
    try:
        return ctx._systemBase.transport.myAddress  # noqa: SLF001 - no public accessor
    except AttributeError:
        return None


#: The longest single wait on the transport: Thespian's select() takes at
#: most about 24 days; a call with a longer timeout waits in rounds of this.
_LONGEST_LISTEN = 3600.0


class Client:
    """Calls, casts and supervisor requests to one node."""

    def __init__(self, system: Any, port: int, node_address: Any = None) -> None:
        self.system = system
        self.port = port
        self._node = node_address

    @property
    def node(self) -> Any:
        """The node supervisor's address."""
        if self._node is None:
            from .registry import NodeSupervisor

            self._node = self.system.createActor(NodeSupervisor, globalName=NODE_NAME)
        return self._node

    def resolve(self, target: Any) -> Any:
        """An address for ``target`` (an address, or a registered name).

        Raises:
            NoProc: the name is not registered.
        """
        if isinstance(target, str):
            addr = self.whereis(target)
            if addr is None:
                raise NoProc(target)
            return addr
        if target is None:
            raise NoProc(target)
        return target

    def whereis(self, name: str) -> Any:
        """The address registered under ``name``, or None."""
        if not isinstance(name, str):
            raise TypeError(f"a registered name is a str, not {type(name).__name__}")
        return self._call(self.node, m.WhereIs(name), 10.0)

    def call(self, target: Any, msg: Any, timeout: float = 5.0) -> Any:
        """Send ``msg`` as a call and return the reply.

        Raises:
            NoProc: the target is dead or the name unknown.
            CallFailed: the server exited while handling the call.
            CallTimeout: no reply within ``timeout`` seconds.
        """
        return self._call(self.resolve(target), msg, timeout)

    def _tell(self, ctx: Any, addr: Any, msg: Any) -> None:
        node = self.node
        ctx.tell(node, msg if addr == node else m.Relay(addr, msg))

    def _call(self, addr: Any, msg: Any, timeout: float) -> Any:
        ref = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        with self.system.private() as ctx:
            self._tell(ctx, addr, m.Call(ref, msg, _own_address(ctx)))
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CallTimeout(addr, msg, timeout)
                answer = ctx.listen(min(left, _LONGEST_LISTEN))
                if isinstance(answer, m.Reply) and answer.ref == ref:
                    if isinstance(answer.value, m.Failure):
                        raise answer.value.error
                    return answer.value
                if isinstance(answer, m.CallError) and answer.ref == ref:
                    if answer.reason == NOPROC:
                        raise NoProc(addr)
                    raise CallFailed(addr, answer.reason)

    def cast(self, target: Any, msg: Any) -> None:
        """Send ``msg`` as a cast (no reply; a dead target drops it)."""
        self._tell(self.system, self.resolve(target), m.Cast(msg))

    def send(self, target: Any, msg: Any) -> None:
        """Send a raw message (delivered to ``handle_info``)."""
        self._tell(self.system, self.resolve(target), msg)

    def get_pid(self, target: Any, timeout: float = 5.0) -> int:
        """The OS pid of a supervised actor."""
        return cast(int, self.call(target, m.GetPid(), timeout))

    def stop(self, target: Any, reason: Any = "normal") -> None:
        """Ask an actor to exit with ``reason`` (it runs terminate first)."""
        self._tell(self.system, self.resolve(target), m.Shutdown(reason))

    def exit(self, target: Any, reason: Any) -> None:
        """``erlang:exit/2``: ``target`` exits with ``reason`` (see ``ExitRequest``)."""
        self._tell(self.system, self.resolve(target), m.ExitRequest(reason))

    def advance_clock(self, target: Any, seconds: float, timeout: float = 5.0) -> float:
        """Move a manual-clock actor's clock; returns once due timers have run."""
        with self.system.private() as ctx:
            self._tell(ctx, self.resolve(target), m.AdvanceClock(seconds, _own_address(ctx)))
            answer = ctx.listen(timeout)
        if not isinstance(answer, m.ClockAdvanced):
            raise CallTimeout(target, "advance_clock", timeout)
        return answer.now

    # ------------------------------------------------------ supervisors
    def start_child(self, sup: Any, spec_or_args: Any, timeout: float = 30.0) -> Any:
        """Start a child (a spec, or args for simple_one_for_one); its address."""
        return self.call(sup, StartChild(spec_or_args), timeout)

    def terminate_child(self, sup: Any, child: Any, timeout: float = 30.0) -> bool:
        """Stop a child by id (or address under simple_one_for_one)."""
        return cast(bool, self.call(sup, TerminateChild(child), timeout))

    def restart_child(self, sup: Any, child_id: Any, timeout: float = 30.0) -> Any:
        """Start again a stopped child; its address."""
        return self.call(sup, RestartChild(child_id), timeout)

    def delete_child(self, sup: Any, child_id: Any, timeout: float = 30.0) -> bool:
        """Forget a stopped child's spec."""
        return cast(bool, self.call(sup, DeleteChild(child_id), timeout))

    def which_children(self, sup: Any, timeout: float = 10.0) -> list[ChildInfo]:
        """``ChildInfo`` rows, in start order."""
        return cast(list[ChildInfo], self.call(sup, WhichChildren(), timeout))

    def count_children(self, sup: Any, timeout: float = 10.0) -> dict[str, int]:
        """``{"specs", "active", "supervisors", "workers"}``."""
        return cast(dict[str, int], self.call(sup, CountChildren(), timeout))

    def get_childspec(self, sup: Any, child_id: Any, timeout: float = 10.0) -> dict[str, Any]:
        """A child's spec as a dict."""
        return cast(dict[str, Any], self.call(sup, GetChildSpec(child_id), timeout))

    def shutdown_tree(self, timeout: float = 30.0) -> None:
        """Stop the node supervisor and its tree in order; wait until it exited."""
        node = self.node
        try:
            pid = self.get_pid(node, timeout=5.0)
        except (NoProc, CallTimeout, CallFailed):
            return
        self.system.tell(node, m.Shutdown("shutdown"))
        deadline = time.monotonic() + timeout
        from .registry import pid_alive

        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
