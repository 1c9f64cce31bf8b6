"""An exiting actor's last messages are sent even when one of its timers comes due.

Thespian 4.0.1 ends an actor by draining its queued transmits
(``systemCommonBase.drainTransmits``: up to 7 s, until the transport has no
transmit left). A timer of the actor that comes due meanwhile makes the
transport's run return the timer's envelope, which is false-ish like "no
transmit left": the drain stops there and the process exits with its last
messages unsent. A supervisor that brutal-killed its children still has
their 100 ms reap checks pending when it exits, so its ``Exit`` to its own
supervisor (and Thespian's goodbye) was lost whenever the parent took
longer than that to acknowledge them (a node stopping its tree, busy with
the reports of the children before): the parent saw only the process gone
and reported ``shutdown_error ... reason=killed``.

Importing this module patches the drain to skip due timers (an exiting
actor handles none) and keep sending until nothing is left or the drain's
own limit passes. Like :mod:`supervision.loopback`, it must be imported
before the ActorSystem is created; actors inherit it through fork.
"""

from __future__ import annotations

from thespian.system import systemCommon as _common  # noqa: N813 - Thespian's module name
from thespian.system.timing import ExpirationTimer, unexpired
from thespian.system.transport import ReceiveEnvelope, TransmitOnly


def _drain_transmits(self) -> None:  # type: ignore[no-untyped-def]
    drain_limit = ExpirationTimer(_common.MAX_SHUTDOWN_DRAIN_PERIOD)
    for remaining in unexpired(drain_limit):
        result = self.transport.run(TransmitOnly, remaining.remaining())
        if isinstance(result, ReceiveEnvelope):
            continue  # a timer came due: not "no transmit left"
        if not result:
            break  # no transmits left


if not getattr(_common.systemCommonBase.drainTransmits, "_drain_patched", False):
    _drain_transmits._drain_patched = True  # type: ignore[attr-defined]
    _common.systemCommonBase.drainTransmits = _drain_transmits
