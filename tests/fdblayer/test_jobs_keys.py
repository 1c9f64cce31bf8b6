"""The key layout and the job value encoding agree with plain ``fdb.tuple.pack``.

The layout builds keys from cached packed prefixes and elements; these
property tests check that the result is byte for byte the packed tuple of
the seed's data model, and that keys of one type never fall in another
type's ranges.
"""

from __future__ import annotations

import fdb.tuple
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fdblayer.jobs import keys
from fdblayer.jobs.codec import JobValue, pack_bytes_element, pack_job_value, unpack_job_value
from fdblayer.jobs.keys import Layout

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
atoms = st.one_of(st.text(max_size=20), ints)
job_types = st.one_of(atoms, st.tuples(atoms), st.tuples(atoms, atoms), st.tuples(atoms, st.tuples(atoms)))
job_ids = st.text(min_size=1, max_size=40)
times = st.integers(min_value=0, max_value=2**63 - 1)
prefixes = st.sampled_from([fdb.tuple.pack((51,)), b"", fdb.tuple.pack(("otpjobs", 2))])


@settings(max_examples=300, deadline=None)  # a real store file: timing varies with load
@given(prefixes, job_types, job_ids, times)
def test_keys_are_the_packed_tuples(prefix, job_type, job_id, sched_time):
    layout = Layout(prefix)
    assert layout.data_key(job_type, job_id) == prefix + fdb.tuple.pack((keys.DATA, job_type, job_id))
    assert layout.pending_key(job_type, sched_time, job_id) == prefix + fdb.tuple.pack(
        (keys.PENDING, job_type, sched_time, job_id)
    )
    assert layout.watches_pending_key(job_type) == prefix + fdb.tuple.pack((keys.WATCHES_PENDING, job_type))
    assert layout.activity_timeout_key(job_type) == prefix + fdb.tuple.pack((keys.ACTIVITY_TIMEOUT, job_type))
    assert layout.unpack_data_key(layout.data_key(job_type, job_id)) == (job_type, job_id)


@given(job_types, job_types, job_ids, times, times)
def test_pending_ranges_hold_exactly_their_jobs(type_a, type_b, job_id, time_a, limit):
    layout = keys.DEFAULT_LAYOUT
    key = layout.pending_key(type_a, time_a, job_id)
    prefix = layout.pending_prefix(type_b)
    in_range = prefix < key < layout.pending_end(type_b, limit)
    assert in_range == (type_a == type_b and time_a <= limit)


@given(st.integers(min_value=0, max_value=2**80 - 1), st.integers(min_value=0, max_value=65535))
def test_activity_keys_sort_by_versionstamp(tr_version, user_version):
    layout = keys.DEFAULT_LAYOUT
    stamp = fdb.tuple.Versionstamp(tr_version.to_bytes(10, "big"), user_version)
    key = layout.activity_key("t", stamp)
    assert key == layout.activity_prefix("t") + fdb.tuple.pack((stamp,))
    later = fdb.tuple.Versionstamp((tr_version + 1).to_bytes(11, "big")[-10:], user_version)
    if tr_version + 1 < 2**80:
        assert layout.activity_key("t", later) > key
    stamped = layout.activity_key_stamped("t")
    assert stamped.startswith(layout.activity_prefix("t"))
    assert int.from_bytes(stamped[-4:], "little") == len(layout.activity_prefix("t")) + 1


@given(st.one_of(st.text(min_size=1, max_size=20), st.integers(-(2**40), 2**40)), st.integers(0, 0xFFFF))
def test_a_stamped_activity_key_is_the_bindings_packing(job_type, user_version):
    layout = keys.DEFAULT_LAYOUT
    expected = fdb.tuple.pack_with_versionstamp(
        (fdb.tuple.Versionstamp(user_version=user_version),), prefix=layout.activity_prefix(job_type)
    )
    assert layout.activity_key_stamped(job_type, user_version) == expected


def test_a_user_version_out_of_range_is_refused_as_by_the_bindings():
    for bad in (-1, 0x10000):
        with pytest.raises(ValueError):
            keys.DEFAULT_LAYOUT.activity_key_stamped("t", bad)


@given(
    st.sampled_from([0, None]),
    st.one_of(st.none(), st.text(min_size=1, max_size=32)),
    times,
    st.booleans(),
    st.binary(max_size=200),
)
def test_job_values_are_the_packed_tuples(seq, lock, sched_time, resubmit, data):
    value = JobValue(seq, lock, sched_time, resubmit, data)
    packed = pack_job_value(value)
    assert packed == fdb.tuple.pack((seq, lock, sched_time, resubmit, data))
    assert unpack_job_value(packed) == value


@given(st.binary(max_size=300))
def test_bytes_element_is_the_packed_tuple(data):
    assert pack_bytes_element(data) == fdb.tuple.pack((data,))
