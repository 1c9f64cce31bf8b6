"""The fast tuple paths give exactly what ``fdb.tuple`` gives, on any input."""

from __future__ import annotations

import fdb.tuple
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fdblayer.jobs import fasttuple
from fdblayer.jobs.keys import ACTIVITY, DEFAULT_LAYOUT, new_versionstamp

complete_stamps = st.builds(
    fdb.tuple.Versionstamp,
    st.binary(min_size=10, max_size=10).filter(lambda b: b != b"\xff" * 10),
    st.integers(0, 0xFFFF),
)
elements = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(),
    st.binary(),
    complete_stamps,
    st.floats(allow_nan=False),
    st.tuples(st.integers(), st.text()),
)
fields = st.lists(elements, max_size=6).map(tuple)


@settings(max_examples=400, deadline=None)
@given(fields)
@example((2**64 - 1,))
@example((-(2**64 - 1),))
@example((2**64 - 2, -(2**64 - 2)))
def test_pack_and_unpack_match_the_bindings(values):
    packed = fasttuple.pack(values)
    assert packed == fdb.tuple.pack(values)
    assert fasttuple.unpack(packed) == fdb.tuple.unpack(packed)


@settings(max_examples=200, deadline=None)
@given(fields, fields, st.integers(0, 0xFFFF))
def test_pack_with_versionstamp_matches_the_bindings(before, after, user_version):
    values = before + (new_versionstamp(user_version),) + after
    assert fasttuple.pack_with_versionstamp(values) == fdb.tuple.pack_with_versionstamp(values)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.integers(0, 8))
def test_unpack_of_any_bytes_behaves_as_the_bindings(raw, offset):
    try:
        expected = fdb.tuple.unpack(raw, offset)
    except Exception as exc:  # noqa: BLE001 - whatever the bindings raise, we raise
        with pytest.raises(type(exc)):
            fasttuple.unpack(raw, offset)
    else:
        assert fasttuple.unpack(raw, offset) == expected


def test_two_incomplete_versionstamps_are_refused_as_by_the_bindings():
    values = (new_versionstamp(), new_versionstamp())
    with pytest.raises(ValueError):
        fasttuple.pack_with_versionstamp(values)
    with pytest.raises(ValueError):
        fasttuple.pack((new_versionstamp(),))


@given(complete_stamps, st.sampled_from(["t", 7, ("a", 1)]))
def test_activity_key_is_the_tuple_packing(vs, job_type):
    prefix = DEFAULT_LAYOUT._type_prefix(ACTIVITY, job_type)
    assert DEFAULT_LAYOUT.activity_key(job_type, vs) == fdb.tuple.pack((vs,), prefix=prefix)


@given(st.integers(0, 0xFFFF), st.sampled_from([b"\xff" * 10, b"\x00" * 10, b"\xff" * 9 + b"\xfe"]))
def test_an_unpacked_versionstamp_is_the_bindings_own(user_version, tr_version):
    raw = b"\x33" + tr_version + user_version.to_bytes(2, "big")  # incomplete (all 0xff) too, as from_bytes reads it
    (ours,), (theirs,) = fasttuple.unpack(raw), fdb.tuple.unpack(raw)
    assert type(ours) is type(theirs) and ours == theirs and hash(ours) == hash(theirs)
    assert (ours.tr_version, ours.user_version, ours.is_complete()) == (
        theirs.tr_version,
        theirs.user_version,
        theirs.is_complete(),
    )
    with pytest.raises(ValueError):
        fdb.tuple.unpack(raw[:-1])
    with pytest.raises(ValueError):
        fasttuple.unpack(raw[:-1])  # a truncated stamp: refused as by the bindings
