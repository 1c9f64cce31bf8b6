"""How a :class:`~supervision.gen_server.GenServer` learns that a child's
process has exited (a mixin), whatever Thespian reports.

Thespian tells a parent of a child's exit with a notice it can lose: for a
child that dies while it handles another child's (its bookkeeping then
forgets every dead child at once) and, rarely, otherwise. So each child's
process is also watched through a pidfd (:class:`~supervision.deaths.DeathWatch`,
one descriptor for the actor however many children it has); a child whose
process is gone and whose notice (and last ``Exit``) has not come within
``LOST_EXIT_GRACE`` seconds is taken as exited all the same
(``child_exit_notice_lost``), unless its process turns out to be running.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Callable

from .deaths import DeathWatch
from .procs import pid_alive, same_process

if TYPE_CHECKING:
    from .addrmap import AddrMap

log = logging.getLogger("supervision.gen_server")

#: Seconds a dead child's own exit notice may take before it counts as lost.
LOST_EXIT_GRACE = 0.5


class ChildDeaths:
    """The child-death methods of a GenServer (which supplies ``_children``,
    ``watch_fd``, ``start_timer`` and ``_on_child_actor_exited``)."""

    _children: AddrMap
    _deaths: DeathWatch | None

    if TYPE_CHECKING:  # supplied by the GenServer

        def watch_fd(self, fd: int, callback: Callable[[], object]) -> None: ...

        def start_timer(self, delay: float, callback: Callable[[], None], real: bool = False) -> int: ...

        def _on_child_actor_exited(self, addr: Any) -> None: ...

    def _watch_death(self, addr: Any, child: dict[str, Any]) -> None:
        """Learn of the child's death from the kernel (a pidfd), not only from
        Thespian's exit notice, which it loses for a child that dies while it
        handles another child's (its bookkeeping then forgets every dead child
        at once) and, rarely, otherwise. Where no pidfd can be had (an old
        kernel, a sandbox, no descriptor left), the check on each exit notice
        (:meth:`_check_silent_children`) is what remains."""
        if self._deaths is not None:
            self._deaths.forget(child.get("pidfd"), addr)  # a second Started: one pidfd a child
        child["pidfd"] = None
        try:
            if self._deaths is None:
                self._deaths = DeathWatch()
                self.watch_fd(self._deaths.fileno(), self._on_deaths)
            child["pidfd"] = self._deaths.watch(child["pid"], child["start"], addr)
        except OSError as exc:
            log.warning("child_death_unwatched child=%s pid=%s error=%r", addr, child["pid"], exc)
            return
        if child["pidfd"] is None:
            self._process_gone(addr)  # dead before it could be watched

    def _on_deaths(self) -> None:
        assert self._deaths is not None
        for addr in self._deaths.gone():
            child = self._children.get(addr)
            if child is not None:
                child["pidfd"] = None  # closed by gone(): its number may be another child's next
                self._process_gone(addr)

    def _check_silent_children(self) -> None:
        """On each exit notice, the children watched by no pidfd whose process
        is gone get the same grace as :meth:`_process_gone` gives."""
        for addr, child in self._children.items():
            if child.get("pid") and child.get("pidfd") is None and not pid_alive(child["pid"]):
                self._process_gone(addr)

    def _process_gone(self, addr: Any) -> None:
        """A child's process has exited: its exit notice (and its last Exit
        message) get ``LOST_EXIT_GRACE`` seconds to arrive; after that the
        child is taken as exited all the same."""
        child = self._children.get(addr)
        if child is not None and not child.get("lost_check"):
            child["lost_check"] = True
            self.start_timer(LOST_EXIT_GRACE, functools.partial(self._lost_exit, addr, child["pid"]), real=True)

    def _lost_exit(self, addr: Any, pid: int) -> None:
        child = self._children.get(addr)
        if child is None or child.get("pid") != pid:
            return
        start = child.get("start")
        if same_process(pid, start) if start is not None else pid_alive(pid):
            child["lost_check"] = False  # still running: a death that could not be read, not a death
            return
        log.warning("child_exit_notice_lost child=%s pid=%s", addr, pid)
        self._on_child_actor_exited(addr)
