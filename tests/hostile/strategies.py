"""Hypothesis strategies of hostile and of valid-but-odd Python values."""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import math

from hypothesis import strategies as st

INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


class Name(str, enum.Enum):
    A = "a"


class Opaque:
    """An object with no JSON meaning."""

    def __repr__(self) -> str:
        return "Opaque()"


#: Text that UTF-8 can encode, biased to what tends to break things.
ODD_CHARS = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(
        [
            "\x00",
            "\x01",
            "\x7f",
            "\n",
            "\r",
            '"',
            "\\",
            "/",
            "%",
            "+",
            "\u2028",
            "\ufeff",
            "\ufffd",
            "\U0010ffff",
            "\U0001d11e",
            "é",
            "\u0663",
        ]
    ),
)
odd_text = st.text(ODD_CHARS, max_size=16)
surrogate = st.characters(categories=["Cs"])
#: A str that UTF-8 cannot encode (a lone surrogate somewhere in it).
surrogate_text = st.tuples(odd_text, surrogate, odd_text).map("".join)

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(INT_MIN, INT_MAX),
    st.sampled_from([INT_MIN, INT_MAX, 0, -1, 2**53 + 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-0.0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308]),
    odd_text,
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
    max_leaves=16,
)
#: Valid job data: a dict of JSON values (str keys, 64-bit ints, finite floats).
json_data = st.dictionaries(odd_text, json_value, max_size=5)

#: Values job data may not hold (each an EncodingError wherever it sits).
bad_leaf = st.one_of(
    st.sampled_from([math.nan, -math.nan, math.inf, -math.inf]),
    st.integers(min_value=INT_MAX + 1),
    st.integers(max_value=INT_MIN - 1),
    st.binary(max_size=4),
    st.binary(max_size=4).map(bytearray),
    st.binary(max_size=4).map(memoryview),
    st.sets(st.integers(), max_size=3),
    st.frozensets(odd_text, max_size=3),
    st.tuples(json_leaf),
    st.just(()),
    st.complex_numbers(),
    st.decimals(),
    st.fractions(),
    st.datetimes(),
    st.dates(),
    st.just(datetime.timedelta(seconds=1)),
    st.just(Color.RED),
    st.builds(Opaque),
    st.sampled_from([range(3), Ellipsis, NotImplemented, type, len, decimal.Decimal("1.5"), fractions.Fraction(1, 3)]),
    surrogate_text,
)
#: Dict keys job data may not hold.
bad_key = st.one_of(
    st.integers(),
    st.floats(),
    st.none(),
    st.booleans(),
    st.tuples(odd_text),
    st.binary(max_size=3),
    st.frozensets(st.integers(), max_size=2),
    st.just(Color.RED),
    surrogate_text,
)


@st.composite
def data_with_one_bad_value(draw) -> dict:
    """Valid job data with one bad value (or bad key) buried at a random depth."""
    if draw(st.booleans()):
        value = draw(bad_leaf)
    else:
        value = {draw(bad_key): draw(json_value)}
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            items = draw(st.lists(json_value, max_size=3))
            items.insert(draw(st.integers(0, len(items))), value)
            value = items
        else:
            siblings = draw(st.dictionaries(odd_text, json_value, max_size=3))
            siblings[draw(odd_text)] = value
            value = siblings
    top = draw(st.dictionaries(odd_text, json_value, max_size=3))
    top[draw(odd_text)] = value
    return top


def nested(depth: int, kinds: list[bool]) -> dict:
    """Job data whose containers nest ``depth`` deep (the top dict counts 1)."""
    value: object = 1
    for i in range(depth - 1):
        value = [value] if kinds[i % len(kinds)] else {"k": value}
    return {"k": value}


#: Job types the queue takes: str, 64-bit int, non-empty tuples of those, 8 deep at most.
odd_type_leaf = st.one_of(odd_text, st.integers(INT_MIN, INT_MAX), st.sampled_from([INT_MIN, INT_MAX, 0, ""]))
odd_type = st.one_of(
    odd_type_leaf,
    st.recursive(
        st.tuples(odd_type_leaf), lambda inner: st.tuples(inner, odd_type_leaf) | st.tuples(inner), max_leaves=6
    ).filter(lambda t: _tuple_depth(t) <= 8),
)
odd_id = st.text(ODD_CHARS, min_size=1, max_size=24)


def _tuple_depth(value: object) -> int:
    if isinstance(value, tuple):
        return 1 + max((_tuple_depth(v) for v in value), default=0)
    return 0


def _deep_tuple(depth: int) -> tuple:
    value: object = "t"
    for _ in range(depth):
        value = (value,)
    return value  # type: ignore[return-value]


#: Values that are not a job type.
bad_type = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.just(()),
    st.tuples(odd_text, st.floats()),
    st.tuples(odd_text, st.none()),
    st.tuples(st.booleans()),
    st.tuples(st.just(())),
    st.sets(st.integers(), max_size=2),
    st.dictionaries(odd_text, st.integers(), max_size=2),
    st.integers(min_value=INT_MAX + 1),
    st.integers(max_value=INT_MIN - 1),
    surrogate_text,
    st.tuples(odd_text, surrogate_text),
    st.integers(9, 30).map(_deep_tuple),
    st.builds(Opaque),
    st.just(Color.RED),
    st.complex_numbers(),
    st.decimals(allow_nan=False),
)
#: Values that are not a job id.
bad_id = st.one_of(
    st.none(),
    st.just(""),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.binary(max_size=4),
    st.tuples(odd_text),
    st.lists(odd_text, max_size=2),
    surrogate_text,
    st.builds(Opaque),
)
#: Values that are not a scheduled time (an int in [0, 2**63 - 1]).
bad_time = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=INT_MAX + 1),
    st.floats(),
    st.booleans(),
    st.text(max_size=3),
    st.decimals(allow_nan=False),
    st.just(datetime.datetime(2020, 1, 1)),
    st.complex_numbers(),
    st.fractions(),
    st.builds(Opaque),
)
#: Values that are not a wait timeout (None or a finite number >= 0).
bad_timeout = st.one_of(
    st.floats(max_value=-1e-300),
    st.integers(max_value=-1),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.booleans(),
    st.text(max_size=3),
    st.complex_numbers(),
    st.decimals(allow_nan=False),
    st.builds(Opaque),
    st.just(datetime.timedelta(seconds=1)),
)
#: Values that are not a type timeout (a finite number in (0, 1e8]: MAX_TYPE_TIMEOUT).
bad_type_timeout = st.one_of(
    st.floats(max_value=0.0),
    st.integers(max_value=0),
    st.integers(min_value=INT_MAX + 1),
    st.floats(min_value=1e8, exclude_min=True),
    st.integers(min_value=10**8 + 1),  # past MAX_TYPE_TIMEOUT
    st.floats(min_value=9.3e18),
    st.sampled_from([math.nan, math.inf]),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.complex_numbers(),
    st.decimals(allow_nan=False),
    st.builds(Opaque),
)
#: Things that are not a Database nor a Transaction.
bad_handle = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.just("sqlite:///x.db"),
    st.integers(),
    st.builds(Opaque),
    st.dictionaries(odd_text, st.integers(), max_size=1),
    st.just(object()),
)
