"""Key selectors and key-value rows, with FoundationDB's semantics.

Principle: a ``KeySelector(key, or_equal, offset)`` names a key relative to
the keys present in the store. It resolves in two steps, exactly as in
FoundationDB: first the *anchor*, the last key ``< key`` (or ``<= key`` when
``or_equal``), then ``offset`` keys forward from the anchor (``offset`` 1 is
the key just after the anchor, 0 the anchor itself, -1 the key before it).
A selector that runs off the front resolves to ``b""``, one that runs off the
end to ``b"\\xff"`` (the end of the user keyspace).
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Union

from fdblayer.exceptions import StoreTypeError

__all__ = ["KeySelector", "KeyValue", "KeyOrSelector", "to_selector", "END_OF_KEYSPACE"]

#: First key after every user key (keys ``>= b"\xff"`` are FoundationDB's system keys).
END_OF_KEYSPACE = b"\xff"


class KeyValue(NamedTuple):
    """One row of a range read: unpacks as ``k, v``."""

    key: bytes
    value: bytes


class KeySelector:
    """A key named by its position relative to a reference key.

    Args:
        key: the reference key.
        or_equal: whether the anchor may be ``key`` itself.
        offset: how many keys to move from the anchor.
    """

    __slots__ = ("key", "or_equal", "offset")

    def __init__(self, key: bytes, or_equal: bool, offset: int) -> None:
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise TypeError(f"KeySelector key must be bytes, got {type(key).__name__}")
        self.key = bytes(key)
        self.or_equal = bool(or_equal)
        self.offset = int(offset)

    @classmethod
    def last_less_than(cls, key: bytes) -> "KeySelector":
        """The last key strictly before ``key``."""
        return cls(key, False, 0)

    @classmethod
    def last_less_or_equal(cls, key: bytes) -> "KeySelector":
        """The last key at or before ``key``."""
        return cls(key, True, 0)

    @classmethod
    def first_greater_than(cls, key: bytes) -> "KeySelector":
        """The first key strictly after ``key``."""
        return cls(key, True, 1)

    @classmethod
    def first_greater_or_equal(cls, key: bytes) -> "KeySelector":
        """The first key at or after ``key``."""
        return cls(key, False, 1)

    def __add__(self, offset: int) -> "KeySelector":
        return KeySelector(self.key, self.or_equal, self.offset + offset)

    def __sub__(self, offset: int) -> "KeySelector":
        return KeySelector(self.key, self.or_equal, self.offset - offset)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeySelector):
            return NotImplemented
        return (self.key, self.or_equal, self.offset) == (other.key, other.or_equal, other.offset)

    def __hash__(self) -> int:
        return hash((self.key, self.or_equal, self.offset))

    def __repr__(self) -> str:
        return f"KeySelector({self.key!r}, {self.or_equal}, {self.offset})"

    def __iter__(self) -> Iterator[object]:
        return iter((self.key, self.or_equal, self.offset))


KeyOrSelector = Union[bytes, KeySelector]


def to_selector(key_or_selector: KeyOrSelector) -> KeySelector:
    """Turn a plain key into ``first_greater_or_equal(key)``; pass selectors through.

    Raises:
        StoreTypeError: when given neither bytes nor a KeySelector.
    """
    if isinstance(key_or_selector, KeySelector):
        return key_or_selector
    if isinstance(key_or_selector, (bytes, bytearray, memoryview)):
        return KeySelector.first_greater_or_equal(bytes(key_or_selector))
    raise StoreTypeError(f"range bound must be bytes or KeySelector, got {type(key_or_selector).__name__}")
