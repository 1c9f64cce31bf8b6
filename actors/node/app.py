"""A user's own supervision tree on a node: ``--app package.module:callable``.

The callable (found with the current directory on ``sys.path``, as worker
handlers are) takes no argument and returns a list of child specs
(:class:`supervision.ChildSpec` or their dicts). The node starts them under
its root, after the built-in subsystems and in the order given; they
restart as the root restarts its own children, stop before them, and show
in ``otpjobs node status``. A child that needs a strategy of its own is a
supervisor spec (``type="supervisor"``).

Principle: everything about the app is checked before the node starts
anything (the import, the call, every spec, its class, that it can travel
to the node, and that its ids and names do not take the node's own), and a
problem is one :class:`AppError` line naming the app.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable

from thespian.actors import Actor

from supervision import BadChildSpec, ChildSpec

from actors.errors import ActorsError
from actors import names
from actors.handlers import HandlerError, add_cwd_to_path, resolve

__all__ = ["AppError", "load_app", "reserved_names"]


class AppError(ActorsError, ValueError):
    """The node's app cannot be used: bad path, failed import or call, or a
    bad child spec. The message names the app and what is wrong."""


def reserved_names() -> set[str]:
    """Every name the node's own actors register (:mod:`actors.names`)."""
    return {value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)}


def load_app(path: str, builtin: Iterable[ChildSpec]) -> list[ChildSpec]:
    """The app's child specs, checked against the node's ``builtin`` children.

    Raises:
        AppError: the app cannot be imported or called, returns something
            other than a list of specs, a spec is malformed, its class cannot
            be imported, its args cannot be pickled, or an id or name is
            already the node's (or repeated).
    """
    add_cwd_to_path()
    try:
        factory = resolve(path)
    except HandlerError as exc:
        raise AppError(str(exc).replace("handler", "app", 1)) from None
    try:
        returned = factory()
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is the app's
        raise AppError(f"app {path!r} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(returned, (list, tuple)):
        raise AppError(f"app {path!r} must return a list of child specs, not {type(returned).__name__}")
    specs = [_check_spec(path, index, raw) for index, raw in enumerate(returned)]
    _check_unique(path, specs, list(builtin))
    return specs


def _check_spec(path: str, index: int, raw: Any) -> ChildSpec:
    """One spec, made and checked as the node would, before it starts."""
    try:
        spec = ChildSpec.from_dict(raw)
        cls = spec.actor_class()
    except BadChildSpec as exc:
        raise AppError(f"app {path!r}: child spec {index}: {exc}") from None
    except (TypeError, ValueError) as exc:  # a dict with the wrong shape
        raise AppError(f"app {path!r}: child spec {index}: {exc}") from None
    if not issubclass(cls, Actor):
        raise AppError(
            f"app {path!r}: child {spec.id!r}: {spec.start} is not an actor class (a GenServer or Supervisor)"
        )
    try:
        pickle.dumps(spec)
    except Exception as exc:  # noqa: BLE001 - pickling user args raises anything
        raise AppError(
            f"app {path!r}: child {spec.id!r}: its args cannot be sent to the node ({type(exc).__name__}: {exc})"
        ) from None
    return spec


def _check_unique(path: str, specs: list[ChildSpec], builtin: list[ChildSpec]) -> None:
    """No id or registered name twice, and none of the node's own."""
    node_ids = {spec.id for spec in builtin}
    taken_names = reserved_names() | {spec.name for spec in builtin if spec.name}
    seen_ids: set = set()
    for spec in specs:
        if spec.id in node_ids or spec.id in seen_ids:
            whose = "the node" if spec.id in node_ids else "another child"
            raise AppError(f"app {path!r}: child id {spec.id!r} is already used by {whose}")
        if spec.name in taken_names:
            raise AppError(
                f"app {path!r}: child {spec.id!r}: name {spec.name!r} is already registered "
                "by the node or another child"
            )
        seen_ids.add(spec.id)
        if spec.name is not None:
            taken_names.add(spec.name)
