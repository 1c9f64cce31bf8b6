"""Actors of the supervisor fault tests (imported by the node's processes)."""

from __future__ import annotations

import os
from typing import Any

from supervision import DEFER_START, GenServer, Request
from supervision.messages import WhereIs


class Sibling(GenServer):
    """A worker that answers ``"pid"``; its supervisor registers its name."""

    def handle_call(self, msg: Any, from_: Any) -> Any:
        if msg == "pid":
            return os.getpid()
        return super().handle_call(msg, from_)


class NeedsSibling(GenServer):
    """Starts only if ``args["sibling"]`` is registered ``args["delay"]`` seconds
    into its start (a child that depends on an earlier sibling, as the
    scheduler depends on scheduler_sup)."""

    def init(self, args: Any) -> Any:
        self.start_timer(args["delay"], lambda: self.run_task(self._check(args["sibling"]), self._checked))
        return DEFER_START

    def _check(self, name: str):
        return (yield Request(self.node, WhereIs(name)))

    def _checked(self, sibling: Any) -> None:
        if sibling is None:
            self.start_failed("sibling not registered")
        else:
            self.start_complete()
