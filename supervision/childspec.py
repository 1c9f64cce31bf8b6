"""Child specs and supervisor flags: plain data with OTP's defaults.

A :class:`ChildSpec` names what to start (``start``: a dotted path
``package.module:Class`` or the class itself), the ``args`` passed to the
child's ``init``, its restart type, its shutdown (seconds, ``"brutal_kill"``
or ``"infinity"``) and its type. Specs round-trip to dicts
(:meth:`ChildSpec.to_dict` / :meth:`ChildSpec.from_dict`) and are validated
field by field before anything starts: a bad field is a
:class:`~supervision.exceptions.BadChildSpec` naming it.
"""

from __future__ import annotations

import builtins
import enum
import importlib
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping

from .exceptions import BadChildSpec


class Strategy(str, enum.Enum):
    """How a supervisor restarts its children."""

    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"
    SIMPLE_ONE_FOR_ONE = "simple_one_for_one"


class Restart(str, enum.Enum):
    """When a child is restarted: always, after an abnormal exit, or never."""

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class ChildType(str, enum.Enum):
    """A worker, or a supervisor (whose default shutdown is infinity)."""

    WORKER = "worker"
    SUPERVISOR = "supervisor"


BRUTAL_KILL = "brutal_kill"
INFINITY = "infinity"


def class_path(obj: Any) -> str:
    """``package.module:Class`` for a class, or the string unchanged."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, type):
        return f"{obj.__module__}:{obj.__qualname__}"
    raise BadChildSpec("start", obj, "must be a class or a 'module:Class' string")


def resolve_class(path: str) -> type:
    """Import ``package.module:Class``.

    Raises:
        BadChildSpec: the path is malformed or does not name a class.
    """
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise BadChildSpec("start", path, "expected 'package.module:Class'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise BadChildSpec("start", path, f"cannot import: {exc}") from None
    if not isinstance(obj, type):
        raise BadChildSpec("start", path, "does not name a class")
    return obj


def _check_shutdown(value: Any) -> None:
    if value in (BRUTAL_KILL, INFINITY):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadChildSpec("shutdown", value, "seconds, 'brutal_kill' or 'infinity'")
    if value < 0 or math.isnan(value):
        raise BadChildSpec("shutdown", value, "must be >= 0")


@dataclass(frozen=True)
class ChildSpec:
    """What a supervisor starts, and how it restarts and stops it.

    ``shutdown`` defaults to 5 s for workers and ``infinity`` for supervisors.
    ``name``, when set, registers the child's address under that node-local
    name while it runs. ``clock`` is ``None`` (the real clock) or
    ``"manual"``: the child's timers then fire only when its clock is
    advanced (tests).
    """

    id: Any
    start: Any
    args: Any = None
    restart: Restart = Restart.PERMANENT
    shutdown: Any = None
    type: ChildType = ChildType.WORKER
    name: str | None = None
    clock: str | None = None

    def __post_init__(self) -> None:
        if self.id is None or isinstance(self.id, (list, dict, set)):
            raise BadChildSpec("id", self.id, "must be a hashable, non-None value")
        object.__setattr__(self, "start", class_path(self.start))
        _enum_field(self, "restart", Restart)
        _enum_field(self, "type", ChildType)
        if self.shutdown is None:
            default = INFINITY if self.type is ChildType.SUPERVISOR else 5.0
            object.__setattr__(self, "shutdown", default)
        _check_shutdown(self.shutdown)
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise BadChildSpec("name", self.name, "must be a non-empty str")
        if self.clock not in (None, "real", "manual"):
            raise BadChildSpec("clock", self.clock, "must be None, 'real' or 'manual'")

    def actor_class(self) -> builtins.type:
        """Import and return the class to start."""
        return resolve_class(self.start)

    def to_dict(self) -> dict[str, Any]:
        """The spec as a plain dict (enums as their values)."""
        d = asdict(self)
        d["restart"] = self.restart.value
        d["type"] = self.type.value
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ChildSpec":
        """Build a spec from a dict; unknown or missing keys are a BadChildSpec."""
        if isinstance(data, ChildSpec):
            return data
        if not isinstance(data, Mapping):
            raise BadChildSpec("spec", data, "must be a ChildSpec or a dict")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise BadChildSpec(sorted(unknown)[0], data[sorted(unknown)[0]], "unknown field")
        for required in ("id", "start"):
            if required not in data:
                raise BadChildSpec(required, None, "is required")
        return cls(**data)

    def with_args(self, args: Any) -> "ChildSpec":
        """A copy with other args (simple_one_for_one's start_child)."""
        return replace(self, args=args)


@dataclass(frozen=True)
class SupFlags:
    """A supervisor's strategy and restart intensity (OTP's defaults: 1 in 5 s)."""

    strategy: Strategy = Strategy.ONE_FOR_ONE
    intensity: int = 1
    period: float = 5.0

    def __post_init__(self) -> None:
        _enum_field(self, "strategy", Strategy)
        if isinstance(self.intensity, bool) or not isinstance(self.intensity, int) or self.intensity < 0:
            raise BadChildSpec("intensity", self.intensity, "must be an int >= 0")
        if isinstance(self.period, bool) or not isinstance(self.period, (int, float)) or not self.period > 0:
            raise BadChildSpec("period", self.period, "must be a number > 0")

    @classmethod
    def from_value(cls, value: Any) -> "SupFlags":
        """Accept a SupFlags or a dict of its fields."""
        if isinstance(value, SupFlags):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"strategy", "intensity", "period"}
            if unknown:
                key = sorted(unknown)[0]
                raise BadChildSpec(key, value[key], "unknown supervisor flag")
            return cls(**value)
        raise BadChildSpec("flags", value, "must be SupFlags or a dict")


def _enum_field(obj: Any, name: str, enum_cls: type[enum.Enum]) -> None:
    value = getattr(obj, name)
    try:
        object.__setattr__(obj, name, enum_cls(value))
    except ValueError:
        allowed = ", ".join(m.value for m in enum_cls)
        raise BadChildSpec(name, value, f"must be one of {allowed}") from None


def check_specs(flags: SupFlags, specs: list[Any]) -> list[ChildSpec]:
    """Validate all specs before anything starts.

    Raises:
        BadChildSpec: a malformed spec, a duplicate id, or a
            simple_one_for_one supervisor without exactly one spec.
    """
    checked = [ChildSpec.from_dict(s) for s in specs]
    for spec in checked:
        spec.actor_class()
    ids = [s.id for s in checked]
    if len(set(ids)) != len(ids):
        raise BadChildSpec("id", ids, "duplicate child ids")
    if flags.strategy is Strategy.SIMPLE_ONE_FOR_ONE and len(checked) != 1:
        raise BadChildSpec("specs", ids, "simple_one_for_one needs exactly one child spec")
    return checked
