"""Exit reasons, as in Erlang/OTP.

A reason is plain picklable data: the strings ``normal``, ``shutdown``,
``killed`` and ``noproc``, a ``("shutdown", detail)`` tuple, or an exception
instance for a crash. ``normal`` and ``shutdown`` exits are not errors: a
transient child is not restarted for them and no crash report is logged.
"""

from __future__ import annotations

import pickle
from typing import Any

NORMAL = "normal"
SHUTDOWN = "shutdown"
KILLED = "killed"
NOPROC = "noproc"


def is_normal(reason: Any) -> bool:
    """True for ``normal``, ``shutdown`` and ``("shutdown", detail)``."""
    if reason in (NORMAL, SHUTDOWN):
        return True
    return isinstance(reason, tuple) and len(reason) == 2 and reason[0] == SHUTDOWN


def reason_name(reason: Any) -> str:
    """A short name for logs: ``bad_call``, ``killed``, ``ValueError``..."""
    kind = getattr(reason, "kind", None)
    if isinstance(kind, str):
        return kind
    if isinstance(reason, BaseException):
        return type(reason).__name__
    if isinstance(reason, tuple) and reason and isinstance(reason[0], str):
        return reason[0]
    return str(reason)


def portable(reason: Any) -> Any:
    """Return ``reason`` if it survives pickling, else a RuntimeError carrying its repr."""
    try:
        pickle.loads(pickle.dumps(reason))
        return reason
    except Exception:  # noqa: BLE001 - any pickling failure means "not portable"
        return RuntimeError(repr(reason))
