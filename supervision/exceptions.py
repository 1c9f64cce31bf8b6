"""Errors raised by the supervision library.

Every error derives from :class:`SupervisionError`. Errors raised at a call
site (bad child spec, call timeout, unknown name) leave the supervision tree
unchanged. Every error pickles (``__reduce__``), so an actor can send it
back to a caller in another process.
"""

from __future__ import annotations

from typing import Any


class SupervisionError(Exception):
    """Root of every error raised by :mod:`supervision`."""


class BadChildSpec(SupervisionError, ValueError):
    """A child spec or supervisor flag has a bad field.

    Attributes:
        field: the name of the offending field.
        value: the offending value.
    """

    def __init__(self, field: str, value: Any, why: str) -> None:
        super().__init__(f"bad child spec field {field!r}={value!r}: {why}")
        self.why = why
        self.field = field
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.value, self.why))


class CallTimeout(SupervisionError, TimeoutError):
    """A call got no reply before its timeout."""

    def __init__(self, target: Any, msg: Any, timeout: float) -> None:
        super().__init__(f"call to {target} timed out after {timeout}s: {msg!r}")
        self.target = target
        self.msg = msg
        self.timeout = timeout

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.target, self.msg, self.timeout))


class NoProc(SupervisionError, LookupError):
    """The target of a call is dead, or a name is not registered."""

    def __init__(self, target: Any) -> None:
        super().__init__(f"no process: {target}")
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.target,))


class CallFailed(SupervisionError):
    """The server exited while handling the call; ``reason`` is its exit reason."""

    def __init__(self, target: Any, reason: Any) -> None:
        super().__init__(f"call to {target} failed: server exited with {reason!r}")
        self.target = target
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.target, self.reason))


class NodeDown(SupervisionError, ConnectionError):
    """No node answers on the given admin port (nothing is started instead)."""

    def __init__(self, port: int, why: str = "nothing listens there") -> None:
        super().__init__(f"no node on 127.0.0.1:{port}: {why}")
        self.why = why
        self.port = port

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.port, self.why))


class StartError(SupervisionError):
    """A child failed to start; ``reason`` is why."""

    def __init__(self, child_id: Any, reason: Any) -> None:
        super().__init__(f"child {child_id!r} failed to start: {reason!r}")
        self.child_id = child_id
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.child_id, self.reason))


class AlreadyStarted(SupervisionError):
    """A child with that id (or a name with that registration) already exists."""


class BadMessage(SupervisionError):
    """An actor got a message it does not handle: it exits with this reason.

    ``kind`` is ``bad_call``, ``bad_cast`` or ``bad_info``, as OTP's
    gen_server reports them.
    """

    kind = "bad_message"

    def __init__(self, msg: Any) -> None:
        super().__init__(f"{self.kind}: {msg!r}")
        self.msg = msg

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.msg,))


class BadCall(BadMessage):
    """An unknown call (reason ``bad_call``)."""

    kind = "bad_call"


class BadCast(BadMessage):
    """An unknown cast (reason ``bad_cast``)."""

    kind = "bad_cast"


class BadInfo(BadMessage):
    """An unknown info message (reason ``bad_info``)."""

    kind = "bad_info"


class RuntimeDirError(SupervisionError):
    """The runtime directory (or a file in it) cannot be trusted: nothing was
    created or signalled. ``path`` is the directory, ``problem`` what is wrong."""

    def __init__(self, path: Any, problem: str) -> None:
        super().__init__(f"runtime directory {path} {problem}")
        self.path = str(path)
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.problem))
