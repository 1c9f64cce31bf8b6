"""Bad input to every jobs API call: the named error, and the store unchanged.

Each case runs on a store holding a declared type, a pending job and a
running job, and compares a dump of every key before and after the call.
"""

from __future__ import annotations

import enum
import math

import pytest

from fdblayer.jobs import api
from fdblayer.jobs.codec import decode_data, encode_data
from fdblayer.jobs.exceptions import (
    EncodingError,
    InvalidArgument,
    JobsError,
    NoTypeTimeout,
)
from fdblayer.jobs.job import Job

T = ("t1", 1024)
BIG = 100_001


def dump(db):
    """Every key and value of the store."""
    return [(kv.key, kv.value) for kv in db.get_range(b"", b"\xff")]


@pytest.fixture
def store(db):
    """A store with a type, a pending job ("p") and a running job ("r")."""
    api.set_type_timeout(db, T, 5)
    api.add(db, T, "r", {"x": 1})
    job, _ = api.accept(db, T, timeout=0)
    api.add(db, T, "p", {"x": 2}, 10)
    return db, job


def _cycle():
    data: dict = {"a": []}
    data["a"].append(data)
    return data


def _deep(depth):
    data: dict = {}
    for _ in range(depth):
        data = {"a": data}
    return data


class Color(enum.Enum):
    RED = 1


UNENCODABLE = [
    {1: 2},
    {"a": {1: 2}},
    {("t",): 1},
    {"a": {1, 2}},
    {"a": frozenset()},
    {"a": b"bytes"},
    {"a": bytearray(b"x")},
    {"a": (1, 2)},
    {"a": float("nan")},
    {"a": float("inf")},
    {"a": -math.inf},
    {"a": 2**63},
    {"a": -(2**63) - 1},
    {"a": 2**64},
    {"a": object()},
    {"a": Color.RED},
    {"a": 1j},
    {"a": "\ud800"},
    {"\udfff": 1},
    {"a": [1, [2, {"b": b"x"}]]},
    _deep(300),
    _cycle(),
    {"a": "x" * BIG},
    {"a": "\x00" * 60_000},  # each zero byte doubles in the tuple encoding
]

UNENCODABLE_IDS = [
    "int-key", "nested-int-key", "tuple-key", "set", "frozenset", "bytes",
    "bytearray", "tuple", "nan", "inf", "-inf", "int64+1", "int64-1", "uint64",
    "object", "enum", "complex", "surrogate", "surrogate-key", "nested-bytes",
    "too-deep", "cycle", "too-large", "zeros-too-large",
]

BAD_TYPES = [None, 1.5, True, b"t", [], (), ("t", 1.5), ("t", None), {"t"}, 2**64, ((((((((("x",),),),),),),),),)]
BAD_IDS = [None, 1, b"j", "", "\ud800", ("j",)]
BAD_TIMES = [-1, 1.5, "1", True, None, 2**63]


def assert_unchanged(db, call, error):
    before = dump(db)
    with pytest.raises(error) as info:
        call()
    assert dump(db) == before
    assert isinstance(info.value, JobsError) and str(info.value)
    return info.value


# ---------------------------------------------------------------- data


@pytest.mark.parametrize("data", UNENCODABLE, ids=UNENCODABLE_IDS)
def test_unencodable_data_writes_nothing(store, data):
    db, job = store
    err = assert_unchanged(db, lambda: api.add(db, T, "new", data), EncodingError)
    assert (err.job_type, err.job_id) == (T, "new")
    assert_unchanged(db, lambda: api.add(db, T, "p", data), EncodingError)
    assert_unchanged(db, lambda: api.update(db, job, data), EncodingError)
    assert_unchanged(db, lambda: api.finish(db, job, data), EncodingError)


@pytest.mark.parametrize("data", [[], "x", 1, None, (("a", 1),)], ids=repr)
def test_data_must_be_a_dict(store, data):
    db, job = store
    assert_unchanged(db, lambda: api.add(db, T, "new", data), InvalidArgument)
    if data is not None:  # None means "keep the data" in update and finish
        assert_unchanged(db, lambda: api.update(db, job, data), InvalidArgument)
        assert_unchanged(db, lambda: api.finish(db, job, data), InvalidArgument)


def test_largest_data_that_fits_is_stored(store):
    db, job = store
    data = {"a": "x" * 99_000}
    api.add(db, T, "big", data)
    assert api.get_job_data(db, T, "big") == data
    api.update(db, job, data)
    assert api.get_job_data(db, T, "r") == data


def test_error_in_a_transaction_leaves_earlier_writes_to_the_caller(store):
    db, _ = store
    tr = db.create_transaction()
    api.add(tr, T, "good", {})
    with pytest.raises(EncodingError):
        api.add(tr, T, "bad", {"a": {1, 2}})
    tr.commit()
    assert api.get_job_state(db, T, "good") == "pending"
    with pytest.raises(api.NotFound):
        api.get_job_state(db, T, "bad")


# ---------------------------------------------------------------- types and ids


@pytest.mark.parametrize("bad", BAD_TYPES, ids=repr)
def test_bad_type(store, bad):
    db, _ = store
    calls = [
        lambda: api.add(db, bad, "j", {}),
        lambda: api.remove(db, bad, "p"),
        lambda: api.get_job_data(db, bad, "p"),
        lambda: api.get_job_state(db, bad, "p"),
        lambda: api.get_jobs(db, bad),
        lambda: api.accept(db, bad, timeout=0),
        lambda: api.set_type_timeout(db, bad, 5),
        lambda: api.clear_type_timeout(db, bad),
        lambda: api.get_type_timeout(db, bad),
        lambda: api.finish(db, Job(bad, "r", "lock")),
        lambda: api.update(db, Job(bad, "r", "lock")),
        lambda: api.resubmit(db, Job(bad, "r", "lock")),
    ]
    if bad is None:  # get_jobs(db, None) lists every type
        del calls[4]
    for call in calls:
        assert_unchanged(db, call, InvalidArgument)


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_bad_id(store, bad):
    db, job = store
    calls = [
        lambda: api.add(db, T, bad, {}),
        lambda: api.remove(db, T, bad),
        lambda: api.get_job_data(db, T, bad),
        lambda: api.get_job_state(db, T, bad),
        lambda: api.finish(db, Job(T, bad, job.lock)),
        lambda: api.update(db, Job(T, bad, job.lock)),
    ]
    for call in calls:
        assert_unchanged(db, call, InvalidArgument)


def test_oversized_id_and_type(store):
    db, _ = store
    long_id = "j" * 10_001
    assert_unchanged(db, lambda: api.add(db, T, long_id, {}), InvalidArgument)
    assert_unchanged(db, lambda: api.remove(db, T, long_id), InvalidArgument)
    assert_unchanged(db, lambda: api.get_job_state(db, T, long_id), InvalidArgument)
    long_type = ("t", "x" * 10_001)
    assert_unchanged(db, lambda: api.set_type_timeout(db, long_type, 5), InvalidArgument)
    assert_unchanged(db, lambda: api.accept(db, long_type, timeout=0), InvalidArgument)
    # Just below the limit works.
    fitting = "j" * 9_900
    api.add(db, T, fitting, {})
    assert api.get_job_state(db, T, fitting) == "pending"


def test_unknown_type(store):
    db, _ = store
    err = assert_unchanged(db, lambda: api.add(db, "nope", "j", {}), NoTypeTimeout)
    assert err.job_type == "nope"
    assert api.get_type_timeout(db, "nope") is None


# ---------------------------------------------------------------- other arguments


@pytest.mark.parametrize("bad", BAD_TIMES, ids=repr)
def test_bad_scheduled_time(store, bad):
    db, job = store
    assert_unchanged(db, lambda: api.add(db, T, "j", {}, bad), InvalidArgument)
    if bad is not None:  # None keeps the time in resubmit, lifts the limit in accept
        assert_unchanged(db, lambda: api.resubmit(db, job, bad), InvalidArgument)
        assert_unchanged(db, lambda: api.accept(db, T, max_sched_time=bad), InvalidArgument)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": -1},
        {"timeout": "1"},
        {"timeout": math.nan},
        {"timeout": math.inf},
        {"no_schedule": "yes"},
        {"no_schedule": True, "max_sched_time": 5},
    ],
    ids=repr,
)
def test_bad_accept_options(store, kwargs):
    db, _ = store
    assert_unchanged(db, lambda: api.accept(db, T, **kwargs), InvalidArgument)


def test_bad_handles(store):
    db, job = store
    for bad in ["r", {"type": T, "id": "r"}, None, Job(T, "r", ""), Job(T, "r", None)]:
        assert_unchanged(db, lambda: api.finish(db, bad), InvalidArgument)
        assert_unchanged(db, lambda: api.update(db, bad), InvalidArgument)
        assert_unchanged(db, lambda: api.resubmit(db, bad), InvalidArgument)
    with pytest.raises(InvalidArgument):
        api.is_resubmitted("r")


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "5", True, None], ids=repr)
def test_bad_type_timeout(store, bad):
    db, _ = store
    assert_unchanged(db, lambda: api.set_type_timeout(db, "t9", bad), InvalidArgument)


def test_database_or_transaction_required(store):
    db, job = store
    for bad in [None, "sqlite:///x.db", object()]:
        assert_unchanged(db, lambda: api.add(bad, T, "j", {}), InvalidArgument)
        assert_unchanged(db, lambda: api.get_job_state(bad, T, "p"), InvalidArgument)
        assert_unchanged(db, lambda: api.finish(bad, job), InvalidArgument)
    tr = db.create_transaction()
    try:
        for call in [
            lambda: api.accept(tr, T, timeout=0),
            lambda: api.set_type_timeout(tr, T, 1),
            lambda: api.clear_type_timeout(tr, T),
            lambda: api.get_type_timeout(tr, T),
        ]:
            assert_unchanged(db, call, InvalidArgument)
    finally:
        tr.cancel()


# ---------------------------------------------------------------- codec


ROUND_TRIPS = [
    {},
    {"a": None, "b": True, "c": False, "d": 0, "e": -1, "f": 2**63 - 1, "g": -(2**63)},
    {"f": 1.5, "g": -0.0, "h": 1e308, "i": 5e-324},
    {"s": "", "u": "héllo ✓ 𝄞", "z": "a\x00b"},
    {"l": [1, "a", [None, {"k": []}]], "d": {"": {"x": {}}}},
    _deep(200),
]


@pytest.mark.parametrize("data", ROUND_TRIPS, ids=range(len(ROUND_TRIPS)))
def test_round_trip(store, data):
    db, _ = store
    assert decode_data(encode_data(data)) == data
    api.add(db, T, "rt", data)
    assert api.get_job_data(db, T, "rt") == data


def test_subclasses_read_back_as_base_types():
    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str, enum.Enum):
        A = "a"

    got = decode_data(encode_data({"l": Level.HIGH, "n": Name.A}))
    assert got == {"l": 3, "n": "a"}
    assert type(got["l"]) is int and type(got["n"]) is str


def test_error_names_the_bad_value():
    with pytest.raises(EncodingError, match=r"set at data\['a'\]\[1\]"):
        encode_data({"a": [1, {2}]})
    with pytest.raises(EncodingError, match="keys must be str"):
        encode_data({"a": {3: 1}})


def test_bad_ids_and_long_keys_say_what_is_wrong(store):
    db, _ = store
    for bad, message in [("", "job id must not be empty"), (5, "job id must be a str, not int: 5"),
                         ("\ud800", "job id is not valid UTF-8 (a lone surrogate?): '\\ud800'")]:
        assert str(assert_unchanged(db, lambda: api.add(db, T, bad, {}), InvalidArgument)) == message
    err = assert_unchanged(db, lambda: api.add(db, T, "j" * 10_001, {}), InvalidArgument)
    assert str(err).startswith("job type and id are too long: the job's longest key would be 10,")
    assert str(err).endswith(" bytes, over the store's limit of 10,000")
    err = assert_unchanged(db, lambda: api.set_type_timeout(db, ("t", "x" * 10_001), 5), InvalidArgument)
    assert str(err).startswith("job type is too long: the job's longest key would be ")
