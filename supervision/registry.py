"""The node's supervisor: root of the tree, name registry and dead-letter desk.

:class:`NodeSupervisor` is the one top-level actor of a node. Besides
supervising the node's children it

* keeps the node-local names (``Register`` / ``Unregister`` casts sent by
  supervisors for children whose spec has a ``name``; ``WhereIs`` calls).
  A name whose process is gone is dropped on lookup, so a name never points
  at a dead actor for long, even after a SIGKILLed subtree;
* receives Thespian's dead letters and answers on behalf of the dead: a
  ``Call`` gets ``noproc``, a ``MonitorRequest`` a ``Down(noproc)``, a
  ``LinkRequest`` an ``Exit(noproc)``, as Erlang does for a dead pid; any
  other message with a ``dead_letter()`` method is answered with the
  ``(address, message)`` pair it returns (an application's own protocol);
* ties the node to the process that started it (``owner``, a pid and its
  start time, for a node started with ``die_with_owner``): it watches that
  process through a pidfd and, once it is gone (``kill -9`` of a foreground
  ``otpjobs worker`` included), logs ``node_owner_down``, stops (SIGSTOP)
  the node's other processes but the admin and the logger at once, so no
  work goes on while the report reaches the log, then SIGKILLs the
  node's process group (the session the admin created, which only the
  node's processes can be in), itself last.
"""

from __future__ import annotations

import logging
import os
from typing import Any, cast

from thespian.actors import DeadEnvelope

from . import messages as m
from .procs import open_process, pid_alive as pid_alive  # noqa: F401 - pid_alive re-exported
from .reasons import NOPROC
from .reports import report
from .owner import freeze_node_group, kill_node_group
from .supervisor import Supervisor

log = logging.getLogger(__name__)

#: Seconds between the owner's death and the kill: time for the report to reach the log.
OWNER_DOWN_DELAY = 0.2


class NodeSupervisor(Supervisor):
    """Top-level supervisor with the name registry and dead-letter handling.

    Its args are ``(flags, specs)`` or ``(flags, specs, owner)`` with
    ``owner`` a ``(pid, start_time)`` pair or None.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: name -> (address, pid). Made before any message: a client may ask
        #: a starting node for a name before the node's Init arrives (an
        #: empty answer then, as for a name not registered yet).
        self._names: dict[str, tuple[Any, int | None]] = {}

    def init(self, args: Any) -> Any:
        flags, specs, *rest = args
        self.node = self.myAddress
        self.handleDeadLetters()
        owner = rest[0] if rest else None
        if owner is not None:
            self._watch_owner(*owner)
        return super().init((flags, specs))

    # ------------------------------------------------------------ the owner
    def _watch_owner(self, pid: int, start: int | None) -> None:
        self._owner = pid
        fd = open_process(pid, start)
        if fd is None:  # gone already (or its number reused: the same)
            self._owner_down()
            return
        self.watch_fd(fd, lambda: self._owner_exited(fd))

    def _owner_exited(self, fd: int) -> None:
        self.unwatch_fd(fd)
        os.close(fd)
        self._owner_down()

    def _owner_down(self) -> None:
        report("node_owner_down", logging.ERROR, supervisor=self.name, owner=self._owner, action="kill_node")
        freeze_node_group()  # the node's work stops now, not after the delay: only the log goes on
        self.start_timer(OWNER_DOWN_DELAY, self._kill_node, real=True)

    def _kill_node(self) -> None:
        """SIGKILL every process of the node (see :func:`owner.kill_node_group`)."""
        kill_node_group()

    def _route(self, msg: Any, sender: Any) -> None:
        if isinstance(msg, m.Relay):
            if msg.target == self.myAddress:
                self._route(msg.message, sender)
            else:
                self.send(msg.target, msg.message)
            return
        inner = msg.msg if isinstance(msg, (m.Cast, m.Call)) else None
        # Names are served even while the tree is still starting: children
        # starting under us look their siblings up.
        if isinstance(inner, m.Register):
            self._register_name(inner)
        elif isinstance(inner, m.Unregister):
            self._unregister_name(inner)
        elif isinstance(inner, m.WhereIs):
            self.send(msg.reply_to or sender, m.Reply(msg.ref, self._whereis(inner.name)))
        else:
            super()._route(msg, sender)

    def _register_name(self, reg: m.Register) -> None:
        old = self._names.get(reg.name)
        if old is not None and old[0] != reg.addr and pid_alive(old[1]):
            report("name_conflict", logging.ERROR, name=reg.name, holder=old[0], claimant=reg.addr)
            return
        self._names[reg.name] = (reg.addr, reg.pid)

    def _unregister_name(self, unreg: m.Unregister) -> None:
        entry = self._names.get(unreg.name)
        if entry is not None and (unreg.addr is None or entry[0] == unreg.addr):
            del self._names[unreg.name]

    def _whereis(self, name: str) -> Any:
        entry = self._names.get(name)
        if entry is None:
            return None
        if not pid_alive(entry[1]):
            del self._names[name]
            return None
        return entry[0]

    def _on_undeliverable(self, msg: Any) -> None:
        if not isinstance(msg, DeadEnvelope):
            return
        dead, letter = msg.deadAddress, msg.deadMessage
        answer = _noproc_answer(dead, letter)
        if answer is None:
            log.debug("dead_letter to=%s message=%.200r", dead, letter)
            return
        to, reply = answer
        self.send(to, reply)

    def format_status(self) -> dict[str, Any]:
        status = super().format_status()
        status["names"] = sorted(self._names)
        return status


def _noproc_answer(dead: Any, letter: Any) -> tuple[Any, Any] | None:
    """What Erlang would answer for a request to a dead actor, and to whom."""
    if isinstance(letter, m.Call) and letter.reply_to is not None:
        return letter.reply_to, m.CallError(letter.ref, dead, NOPROC)
    if isinstance(letter, m.MonitorRequest) and letter.watcher is not None:
        return letter.watcher, m.Down(letter.ref, dead, NOPROC)
    if isinstance(letter, m.LinkRequest) and letter.addr is not None:
        return letter.addr, m.Exit(dead, NOPROC)
    hook = getattr(letter, "dead_letter", None)
    if callable(hook):
        return cast("tuple[Any, Any] | None", hook())
    return None
