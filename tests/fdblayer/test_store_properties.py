"""Property tests: tuple keys, ranges and selectors against a plain sorted-dict model."""

from __future__ import annotations

import functools
from bisect import bisect_left, bisect_right
from typing import Dict, List

import fdb.tuple
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fdblayer import KeySelector, transactional

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

elements = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.text(max_size=4),
    st.binary(max_size=4),
)
tuples = st.tuples(st.sampled_from(["a", "b"]), elements) | st.tuples(st.sampled_from(["a", "b"]), elements, elements)
small_keys = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 12))
keys = st.one_of(small_keys, small_keys, tuples).map(fdb.tuple.pack)  # collisions are common
selectors = st.builds(KeySelector, keys | st.just(b""), st.booleans(), st.integers(-3, 3))
bounds = keys | selectors


class SortedModel:
    """The reference: a dict plus FoundationDB's selector rules on a sorted list."""

    def __init__(self) -> None:
        self.data: Dict[bytes, bytes] = {}

    def keys(self) -> List[bytes]:
        return sorted(self.data)

    def resolve(self, selector) -> bytes:
        if isinstance(selector, bytes):
            selector = KeySelector.first_greater_or_equal(selector)
        ordered = self.keys()
        find = bisect_right if selector.or_equal else bisect_left
        index = find(ordered, selector.key) - 1 + selector.offset
        if index < 0:
            return b""
        if index >= len(ordered):
            return b"\xff"
        return ordered[index]

    def get_range(self, begin, end, limit, reverse):
        low, high = self.resolve(begin), self.resolve(end)
        rows = [(k, self.data[k]) for k in self.keys() if low <= k < high]
        if reverse:
            rows.reverse()
        return rows[:limit] if limit else rows


ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), keys, st.binary(max_size=3)),
        st.tuples(st.just("clear"), keys),
        st.tuples(st.just("clear_range"), keys, keys),
    ),
    min_size=1,
    max_size=30,
)


def apply(tr, model: SortedModel, operations) -> None:
    for op in operations:
        if op[0] == "set":
            tr[op[1]] = op[2]
            model.data[op[1]] = op[2]
        elif op[0] == "clear":
            del tr[op[1]]
            model.data.pop(op[1], None)
        else:
            tr.clear_range(op[1], op[2])
            for k in [k for k in model.data if op[1] <= k < op[2]]:
                del model.data[k]


@transactional
def _wipe(tr):
    tr.clear_range(b"", b"\xff")


@SETTINGS
@given(
    operations=ops,
    queries=st.lists(st.tuples(bounds, bounds, st.integers(0, 4), st.booleans()), min_size=1, max_size=6),
)
def test_ranges_and_selectors_match_model(db, operations, queries):
    _wipe(db)
    model = SortedModel()
    tr = db.create_transaction()
    try:
        apply(tr, model, operations)
        for begin, end, limit, reverse in queries:  # inside the writing transaction
            assert tr.get_range(begin, end, limit=limit, reverse=reverse) == model.get_range(begin, end, limit, reverse)
        tr.commit()
        tr = db.create_transaction()
        for begin, end, limit, reverse in queries:  # after commit, in a fresh one
            assert tr.get_range(begin, end, limit=limit, reverse=reverse) == model.get_range(begin, end, limit, reverse)
            if isinstance(begin, KeySelector):
                assert tr.get_key(begin) == model.resolve(begin)
    finally:
        tr.cancel()  # a failed example must not keep the write lock


@SETTINGS
@given(items=st.lists(tuples, min_size=1, max_size=30, unique=True))
def test_packed_keys_come_back_in_tuple_order(db, items):
    _wipe(db)

    @transactional
    def store(tr):
        for item in items:
            tr[fdb.tuple.pack(item)] = b""

    store(db)
    rows = db.get_range(b"", b"\xff")
    by_tuple = sorted(items, key=functools.cmp_to_key(fdb.tuple.compare))
    assert [fdb.tuple.unpack(k) for k, _ in rows] == [tuple(t) for t in by_tuple]
    prefix = fdb.tuple.range(("a",))
    in_a = db.get_range(prefix.start, prefix.stop)
    assert [fdb.tuple.unpack(k) for k, _ in in_a] == [tuple(t) for t in by_tuple if t[0] == "a"]
