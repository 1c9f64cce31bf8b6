"""Containers keyed by Thespian actor addresses.

Thespian's ``ActorAddress`` is not hashable, and an address returned by
``createActor`` inside an actor is a local placeholder that compares equal
to the child's real address once it is known. These containers therefore
compare keys with ``==`` (a linear scan: children and links per actor are
few).
"""

from __future__ import annotations

from typing import Any, Iterator

_MISSING = object()


class AddrMap:
    """A mapping from actor addresses to values, comparing keys with ``==``."""

    def __init__(self) -> None:
        self._items: list[list[Any]] = []

    def _find(self, addr: Any) -> int:
        for i, item in enumerate(self._items):
            if item[0] == addr:
                return i
        return -1

    def __contains__(self, addr: Any) -> bool:
        return self._find(addr) >= 0

    def __getitem__(self, addr: Any) -> Any:
        i = self._find(addr)
        if i < 0:
            raise KeyError(addr)
        return self._items[i][1]

    def __setitem__(self, addr: Any, value: Any) -> None:
        i = self._find(addr)
        if i < 0:
            self._items.append([addr, value])
        else:
            self._items[i][1] = value

    def get(self, addr: Any, default: Any = None) -> Any:
        i = self._find(addr)
        return default if i < 0 else self._items[i][1]

    def pop(self, addr: Any, default: Any = _MISSING) -> Any:
        i = self._find(addr)
        if i < 0:
            if default is _MISSING:
                raise KeyError(addr)
            return default
        return self._items.pop(i)[1]

    def __iter__(self) -> Iterator[Any]:
        return iter([item[0] for item in self._items])

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[Any, Any]]:
        return [(k, v) for k, v in self._items]


class AddrSet:
    """A set of actor addresses, comparing with ``==``."""

    def __init__(self, addrs: Any = ()) -> None:
        self._map = AddrMap()
        for addr in addrs:
            self.add(addr)

    def add(self, addr: Any) -> None:
        if addr not in self._map:
            self._map[addr] = True

    def discard(self, addr: Any) -> None:
        self._map.pop(addr, None)

    def __contains__(self, addr: Any) -> bool:
        return addr in self._map

    def __iter__(self) -> Iterator[Any]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)
