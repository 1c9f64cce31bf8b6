"""Hostile input to every public call of the queue (``actors.jobs``).

Each bad argument gets the documented error (a :class:`actors.jobs.JobsError`
subclass) and leaves the SQLite store as it was: every row, read raw, and no
write commit at all (see :mod:`tests.hostile.store`). Valid but odd input
(NUL bytes, astral characters, 64-bit extremes, -0.0, keys and values near
the store's limits) round-trips exactly.

One real SQLite file for the module, holding a declared type ``T`` with a
running job ``r``, a pending job ``p`` and a finished job ``f``; round trips
use a type of their own and clean up after each example.
"""

from __future__ import annotations

import enum
import math
import socket
import time
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import fdblayer
from actors import jobs
from fdblayer.exceptions import StoreError
from fdblayer.interface import MAX_KEY_SIZE, MAX_VALUE_SIZE
from fdblayer.jobs.codec import decode_data, encode_data
from fdblayer.jobs.job import Job
from fdblayer.jobs.validate import MAX_TYPE_TIMEOUT

from . import strategies as S
from .store import StoreFile, same_json, unchanged

pytestmark = pytest.mark.timeout(120)

T = ("hostile", 1)
RT = "roundtrip"
FEW = settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


class Q:
    """The module's store: its file, a handle, and the running job's handle."""

    def __init__(self, store: StoreFile) -> None:
        self.store = store
        self.db = fdblayer.open(store.url)
        jobs.set_type_timeout(self.db, T, 30)
        jobs.set_type_timeout(self.db, RT, 30)
        jobs.add(self.db, T, "r", {"x": 1})
        self.job, _ = jobs.accept(self.db, T, timeout=0)
        jobs.add(self.db, T, "f", {"x": 3})
        done, _ = jobs.accept(self.db, T, timeout=0)
        jobs.finish(self.db, done, {"x": 4})
        jobs.add(self.db, T, "p", {"x": 2}, 10)

    def refused(self, call: Callable[[], Any], error: type[BaseException] = jobs.JobsError) -> BaseException:
        return unchanged(self.store, call, error)


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    queue = Q(StoreFile(tmp_path_factory.mktemp("hostile-queue") / "store.db"))
    try:
        yield queue
    finally:
        queue.db.close()
        queue.store.close()


def _fake_port() -> int:
    with socket.socket() as s:  # a port nothing listens on: no call may get that far
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_subscription() -> jobs.Subscription:
    return jobs.Subscription("ref", T, "p", None, _fake_port())


#: What the tests below call with hostile arguments, by public name.
COVERED = {
    "accept",
    "add",
    "add_many",
    "clear_type_timeout",
    "finish",
    "get_job",
    "get_job_data",
    "get_job_state",
    "get_jobs",
    "get_type_timeout",
    "get_types",
    "is_resubmitted",
    "remove",
    "resubmit",
    "set_type_timeout",
    "subscribe",
    "subscribe_task",
    "unsubscribe",
    "update",
    "wait",
    # the worker pools' calls: tests/hostile/test_worker_api.py
    "enqueue",
    "result",
    "schedule",
    "schedules",
    "status",
    "unschedule",
    "handler",
    "pause",
    "resume",
    "prune",
}


def test_every_public_function_is_covered() -> None:
    public = {
        name for name in jobs.__all__ if callable(getattr(jobs, name)) and not isinstance(getattr(jobs, name), type)
    }
    assert public <= COVERED, f"public calls with no hostile test: {sorted(public - COVERED)}"


# ---------------------------------------------------------------- job data


@SOME
@given(data=S.data_with_one_bad_value())
def test_data_with_one_bad_value_anywhere_is_an_encoding_error(q, data) -> None:
    err = q.refused(lambda: jobs.add(q.db, T, "new", data), jobs.EncodingError)
    assert (err.job_type, err.job_id) == (T, "new")
    q.refused(lambda: jobs.add(q.db, T, "p", data), jobs.EncodingError)
    q.refused(lambda: jobs.update(q.db, q.job, data), jobs.EncodingError)
    q.refused(lambda: jobs.finish(q.db, q.job, data), jobs.EncodingError)
    tr = q.db.create_transaction()
    try:
        q.refused(lambda: jobs.add(tr, T, "new", data), jobs.EncodingError)
    finally:
        tr.cancel()


@FEW
@given(
    data=st.one_of(
        S.json_value.filter(lambda v: not isinstance(v, dict)),
        S.bad_leaf,
        st.lists(st.tuples(S.odd_text, S.json_leaf), max_size=3),
    )
)
def test_data_that_is_not_a_dict_is_an_invalid_argument(q, data) -> None:
    q.refused(lambda: jobs.add(q.db, T, "new", data), jobs.InvalidArgument)
    if data is not None:  # None keeps the data in update and finish
        q.refused(lambda: jobs.update(q.db, q.job, data), jobs.InvalidArgument)
        q.refused(lambda: jobs.finish(q.db, q.job, data), jobs.InvalidArgument)


@FEW
@given(depth=st.integers(250, 1200), kinds=st.lists(st.booleans(), min_size=1, max_size=4))
@example(depth=256, kinds=[False])
@example(depth=257, kinds=[True])
def test_data_nests_256_deep_at_most(q, depth, kinds) -> None:
    data = S.nested(depth, kinds)
    if depth > 256:
        q.refused(lambda: jobs.add(q.db, RT, "deep", data), jobs.EncodingError)
        return
    jobs.add(q.db, RT, "deep", data)
    try:
        assert jobs.get_job_data(q.db, RT, "deep") == data
    finally:
        jobs.remove(q.db, RT, "deep")


def test_cyclic_data_is_an_encoding_error(q) -> None:
    loop: list = []
    loop.append(loop)
    looped: dict = {"a": {}}
    looped["a"]["b"] = looped
    for data in ({"l": loop}, looped):
        q.refused(lambda: jobs.add(q.db, T, "new", data), jobs.EncodingError)
        q.refused(lambda: jobs.update(q.db, q.job, data), jobs.EncodingError)


def _round_trip(
    q: Q, job_id: str, data: dict, later: dict, final: dict, scheduled_time: int = 0, no_schedule: bool = False
) -> None:
    """add, read, accept, update, finish and remove one job of type RT, checking the data each time."""
    jobs.add(q.db, RT, job_id, data, scheduled_time)
    try:
        assert same_json(data, jobs.get_job_data(q.db, RT, job_id))
        info = jobs.get_job(q.db, RT, job_id)
        assert info.state == "pending" and info.scheduled_time == scheduled_time and same_json(data, info.data)
        assert [(j.id, j.state) for j in jobs.get_jobs(q.db, RT)] == [(job_id, "pending")]
        if scheduled_time:
            job = jobs.resubmit(q.db, Job(RT, job_id, "unused"), 0)
        job, got = jobs.accept(q.db, RT, timeout=0, no_schedule=no_schedule)
        assert (job.type, job.id) == (RT, job_id) and same_json(data, got)
        job = jobs.update(q.db, job, later)
        assert same_json(later, jobs.get_job_data(q.db, RT, job_id))
        assert jobs.get_job_state(q.db, RT, job_id) == "running"
        jobs.finish(q.db, job, final)
        assert same_json(final, jobs.get_job_data(q.db, RT, job_id))
        assert jobs.get_job_state(q.db, RT, job_id) == jobs.JobState.FINISHED
    finally:
        jobs.remove(q.db, RT, job_id)


@FEW
@given(
    job_id=S.odd_id,
    data=S.json_data,
    later=S.json_data,
    final=S.json_data,
    scheduled_time=st.sampled_from([0, 1, S.INT_MAX]) | st.integers(0, S.INT_MAX),
    no_schedule=st.booleans(),
)
def test_odd_valid_data_and_ids_round_trip_exactly(q, job_id, data, later, final, scheduled_time, no_schedule) -> None:
    assert same_json(data, decode_data(encode_data(data)))
    _round_trip(q, job_id, data, later, final, scheduled_time, no_schedule)


def test_subclasses_of_json_types_read_back_as_the_base_types(q) -> None:
    class Text(str):
        pass

    class Number(int):
        pass

    class Ordered(dict):
        pass

    data = Ordered({Text("k"): [S.Level.HIGH, S.Name.A, Number(7), Text("v")]})
    jobs.add(q.db, RT, Text("sub"), data)
    try:
        got = jobs.get_job_data(q.db, RT, "sub")
        assert same_json({"k": [3, "a", 7, "v"]}, got)
    finally:
        jobs.remove(q.db, RT, "sub")


# ------------------------------------------------------- sizes near the limits


#: Characters that cost 1 (``x``), 2 (NUL, escaped by the tuple encoding; ``é``) or 4 bytes.
SIZED = st.sampled_from(["x", "\x00", "é", "\U0001d11e"])


@st.composite
def sized_text(draw, low: int, high: int) -> str:
    """A str of ``low..high`` characters made of a few runs of SIZED characters."""
    total = draw(st.integers(low, high))
    if total == 0:
        return ""
    runs = draw(st.lists(st.tuples(SIZED, st.integers(1, total)), min_size=1, max_size=4))
    text = "".join(ch * n for ch, n in runs)
    return (text * (total // max(1, len(text)) + 1))[:total]


@FEW
@given(job_id=sized_text(1, 40) | sized_text(4000, 9990), payload=sized_text(20_000, MAX_VALUE_SIZE + 10))
def test_data_near_the_value_limit_is_stored_whole_or_refused(q, job_id, payload) -> None:
    data = {"a": payload}
    before = q.store.snapshot()
    try:
        jobs.add(q.db, RT, job_id, data)
    except (jobs.EncodingError, jobs.InvalidArgument):
        assert q.store.snapshot() == before
        return
    jobs.remove(q.db, RT, job_id)
    _round_trip(q, job_id, data, data, data)


@FEW
@given(type_part=sized_text(0, 6000), job_id=sized_text(1, 10_100), as_tuple=st.booleans())
@example(type_part="", job_id="j" * (MAX_KEY_SIZE - 40), as_tuple=False)
def test_keys_near_the_key_limit_work_in_every_state_or_are_refused(q, type_part, job_id, as_tuple) -> None:
    job_type = ("k", type_part, S.INT_MAX) if as_tuple else "k" + type_part
    before = q.store.snapshot()
    try:
        jobs.set_type_timeout(q.db, job_type, 30)
    except jobs.InvalidArgument:
        assert q.store.snapshot() == before
        return
    try:
        before = q.store.snapshot()
        try:
            jobs.add(q.db, job_type, job_id, {"a": 1})
        except jobs.InvalidArgument:
            assert q.store.snapshot() == before
            return
        job, _ = jobs.accept(q.db, job_type, timeout=0)
        job = jobs.update(q.db, job, {"a": 2})
        job = jobs.resubmit(q.db, job, S.INT_MAX)  # the longest pending key: a 64-bit time
        jobs.finish(q.db, job, {"a": 3})
        assert jobs.get_job(q.db, job_type, job_id).scheduled_time == S.INT_MAX
        assert [j.id for j in jobs.get_jobs(q.db, job_type)] == [job_id]
        assert job_type in jobs.get_types(q.db)
        jobs.remove(q.db, job_type, job_id)
    finally:
        jobs.clear_type_timeout(q.db, job_type)


# ---------------------------------------------------------------- add_many

needs_add_many = pytest.mark.skipif(not hasattr(jobs, "add_many"), reason="no jobs.add_many in this version")


@st.composite
def many_with_one_bad(draw) -> tuple[Any, type[BaseException]]:
    """Good (id, data) pairs with one bad thing among them, and the error it must give."""
    pairs = draw(st.lists(st.tuples(S.odd_id, S.json_data), max_size=4, unique_by=lambda p: p[0]))
    kind = draw(st.sampled_from(["data", "id", "dup", "pair", "container", "notdict", "big"]))
    if kind == "container":
        return draw(
            st.one_of(
                st.text(max_size=3), st.binary(max_size=3), st.integers(), st.none(), st.floats(), st.builds(S.Opaque)
            )
        ), jobs.InvalidArgument
    at = draw(st.integers(0, len(pairs)))
    if kind == "data":
        pairs.insert(at, (draw(S.odd_id.filter(lambda i: i not in dict(pairs))), draw(S.data_with_one_bad_value())))
        error: type[BaseException] = jobs.EncodingError
    elif kind == "big":  # one job's data over the value limit
        pairs.insert(at, (draw(S.odd_id.filter(lambda i: i not in dict(pairs))), {"s": "x" * (MAX_VALUE_SIZE + 1)}))
        error = jobs.EncodingError
    elif kind == "notdict":
        pairs.insert(
            at,
            (
                "notdict",
                draw(st.one_of(st.lists(st.integers(), max_size=2), st.text(max_size=2), st.integers(), st.none())),
            ),
        )
        error = jobs.InvalidArgument
    elif kind == "id":
        pairs.insert(at, (draw(S.bad_id), {}))
        error = jobs.InvalidArgument
    elif kind == "dup":
        assume(pairs)
        pairs.insert(at, (pairs[0][0], {"again": True}))
        error = jobs.InvalidArgument
    else:
        pairs.insert(
            at,
            draw(
                st.one_of(
                    st.tuples(S.odd_id),
                    st.tuples(S.odd_id, S.json_data, S.json_data),
                    st.lists(st.just("x"), min_size=2, max_size=2),
                    st.text(max_size=2),
                    st.none(),
                )
            ),
        )
        error = jobs.InvalidArgument
    return (pairs if draw(st.booleans()) else iter(pairs)), error


@needs_add_many
@FEW
@given(case=many_with_one_bad())
def test_add_many_writes_nothing_when_one_job_is_bad(q, case) -> None:
    many, error = case
    q.refused(lambda: jobs.add_many(q.db, T, many), error)


@needs_add_many
@FEW
@given(bad_type=S.bad_type, bad_time=S.bad_time, bad_db=S.bad_handle)
def test_add_many_refuses_a_bad_type_time_or_handle(q, bad_type, bad_time, bad_db) -> None:
    q.refused(lambda: jobs.add_many(q.db, bad_type, {"j": {}}), jobs.InvalidArgument)
    q.refused(lambda: jobs.add_many(q.db, T, {"j": {}}, bad_time), jobs.InvalidArgument)
    q.refused(lambda: jobs.add_many(bad_db, T, {"j": {}}), jobs.InvalidArgument)
    q.refused(lambda: jobs.add_many(q.db, ("nope",), {"j": {}}), jobs.NoTypeTimeout)


@needs_add_many
@FEW
@given(many=st.dictionaries(S.odd_id, S.json_data, max_size=6), as_pairs=st.booleans())
def test_add_many_round_trips_odd_ids_and_data(q, many, as_pairs) -> None:
    try:
        new = jobs.add_many(q.db, RT, list(many.items()) if as_pairs else many)
        assert new == len(many)
        got = {j.id: j.data for j in jobs.get_jobs(q.db, RT)}
        assert got.keys() == many.keys() and all(same_json(many[k], got[k]) for k in many)
        assert jobs.add_many(q.db, RT, many) == 0  # all exist: resubmitted, none new
    finally:
        for job_id in many:
            jobs.remove(q.db, RT, job_id)


# ---------------------------------------------------------------- types and ids


def _type_calls(q: Q, bad: Any) -> list[Callable[[], Any]]:
    calls = [
        lambda: jobs.add(q.db, bad, "j", {}),
        lambda: jobs.remove(q.db, bad, "p"),
        lambda: jobs.get_job_data(q.db, bad, "p"),
        lambda: jobs.get_job_state(q.db, bad, "p"),
        lambda: jobs.get_job(q.db, bad, "p"),
        lambda: jobs.accept(q.db, bad, timeout=0),
        lambda: jobs.set_type_timeout(q.db, bad, 5),
        lambda: jobs.clear_type_timeout(q.db, bad),
        lambda: jobs.get_type_timeout(q.db, bad),
        lambda: jobs.finish(q.db, Job(bad, "r", q.job.lock)),
        lambda: jobs.update(q.db, Job(bad, "r", q.job.lock)),
        lambda: jobs.resubmit(q.db, Job(bad, "r", q.job.lock)),
        lambda: jobs.subscribe(q.db, bad, "p", node=None),
        lambda: next(jobs.subscribe_task(None, q.db, bad, "p")),
    ]
    if bad is not None:  # get_jobs(db, None) lists every type
        calls.append(lambda: jobs.get_jobs(q.db, bad))
    return calls


@SOME
@given(bad=S.bad_type)
def test_a_bad_type_is_an_invalid_argument_everywhere(q, bad) -> None:
    for call in _type_calls(q, bad):
        q.refused(call, jobs.InvalidArgument)


@FEW
@given(job_type=S.odd_type)
def test_odd_valid_types_round_trip(q, job_type) -> None:
    assume(job_type not in (T, RT))
    jobs.set_type_timeout(q.db, job_type, 7)
    try:
        assert jobs.get_type_timeout(q.db, job_type) == 7
        assert job_type in jobs.get_types(q.db)
        jobs.add(q.db, job_type, "j", {"t": 1})
        job, data = jobs.accept(q.db, job_type, timeout=0)
        assert job.type == job_type and type(job.type) is type(job_type) and data == {"t": 1}
        jobs.finish(q.db, job)
        assert [(j.type, j.id, j.state) for j in jobs.get_jobs(q.db, job_type)] == [(job_type, "j", "finished")]
        jobs.remove(q.db, job_type, "j")
    finally:
        jobs.clear_type_timeout(q.db, job_type)
    assert jobs.get_type_timeout(q.db, job_type) is None
    q.refused(lambda: jobs.add(q.db, job_type, "j", {}), jobs.NoTypeTimeout)


@SOME
@given(bad=S.bad_id)
def test_a_bad_id_is_an_invalid_argument_everywhere(q, bad) -> None:
    for call in [
        lambda: jobs.add(q.db, T, bad, {}),
        lambda: jobs.remove(q.db, T, bad),
        lambda: jobs.get_job_data(q.db, T, bad),
        lambda: jobs.get_job_state(q.db, T, bad),
        lambda: jobs.get_job(q.db, T, bad),
        lambda: jobs.finish(q.db, Job(T, bad, q.job.lock)),
        lambda: jobs.update(q.db, Job(T, bad, q.job.lock)),
        lambda: jobs.resubmit(q.db, Job(T, bad, q.job.lock)),
        lambda: jobs.subscribe(q.db, T, bad, node=None),
        lambda: next(jobs.subscribe_task(None, q.db, T, bad)),
    ]:
        q.refused(call, jobs.InvalidArgument)


@FEW
@given(job_id=S.odd_id)
def test_unknown_jobs_and_types_are_not_found(q, job_id) -> None:
    assume(job_id not in ("r", "p", "f"))
    for call in [
        lambda: jobs.remove(q.db, T, job_id),
        lambda: jobs.get_job_data(q.db, T, job_id),
        lambda: jobs.get_job_state(q.db, T, job_id),
        lambda: jobs.get_job(q.db, T, job_id),
        lambda: jobs.resubmit(q.db, Job(T, job_id, "lock")),
    ]:
        q.refused(call, jobs.NotFound)
    for call in [lambda: jobs.update(q.db, Job(T, job_id, "lock")), lambda: jobs.finish(q.db, Job(T, job_id, "lock"))]:
        q.refused(call, jobs.Halt)
    err = q.refused(lambda: jobs.add(q.db, ("nope", job_id), "j", {}), jobs.NoTypeTimeout)
    assert err.job_type == ("nope", job_id)


def test_a_job_of_an_undeclared_type_is_refused_at_once(q) -> None:
    t = time.monotonic()
    q.refused(lambda: jobs.accept(q.db, "nope", timeout=30), jobs.NoTypeTimeout)  # as add: never a wait
    assert time.monotonic() - t < 5
    for call in [
        lambda: jobs.subscribe(q.db, "nope", "p", node=_fake_port()),
        lambda: jobs.subscribe(q.db, T, "missing", node=_fake_port()),
    ]:
        q.refused(call, jobs.NotFound)  # read from the store before any node is called
    assert jobs.get_type_timeout(q.db, "nope") is None


# ------------------------------------------------------------ what errors say


def test_errors_say_what_is_wrong(q) -> None:
    for bad, message in [
        ("", "job id must not be empty"),
        (5, "job id must be a str, not int: 5"),
        ("\ud800", "job id is not valid UTF-8 (a lone surrogate?): '\\ud800'"),
    ]:
        assert str(q.refused(lambda: jobs.add(q.db, T, bad, {}), jobs.InvalidArgument)) == message
    err = q.refused(lambda: jobs.add(q.db, T, "j" * 10_001, {}), jobs.InvalidArgument)
    assert str(err).startswith("job type and id are too long: the job's longest key would be 10,")
    assert str(err).endswith(" bytes, over the store's limit of 10,000")
    err = q.refused(lambda: jobs.set_type_timeout(q.db, ("t", "x" * 10_001), 5), jobs.InvalidArgument)
    assert str(err).startswith("job type is too long: the job's longest key would be ")
    with pytest.raises(jobs.EncodingError, match=r"set at data\['a'\]\[1\]"):
        encode_data({"a": [1, {2}]})
    with pytest.raises(jobs.EncodingError, match="keys must be str"):
        encode_data({"a": {3: 1}})


def test_an_error_inside_a_transaction_leaves_its_earlier_writes_to_the_caller(q) -> None:
    tr = q.db.create_transaction()
    jobs.add(tr, RT, "good", {})
    with pytest.raises(jobs.EncodingError):
        jobs.add(tr, RT, "bad", {"a": {1, 2}})
    tr.commit()
    try:
        assert jobs.get_job_state(q.db, RT, "good") == "pending"
        with pytest.raises(jobs.NotFound):
            jobs.get_job_state(q.db, RT, "bad")
    finally:
        jobs.remove(q.db, RT, "good")


# ------------------------------------------------------------ other arguments


@SOME
@given(bad=S.bad_time)
def test_a_bad_scheduled_time_is_an_invalid_argument(q, bad) -> None:
    q.refused(lambda: jobs.add(q.db, T, "new", {}, bad), jobs.InvalidArgument)
    q.refused(lambda: jobs.add(q.db, T, "p", {}, bad), jobs.InvalidArgument)
    q.refused(lambda: jobs.resubmit(q.db, q.job, bad), jobs.InvalidArgument)
    q.refused(lambda: jobs.accept(q.db, T, timeout=0, max_sched_time=bad), jobs.InvalidArgument)


@SOME
@given(bad=S.bad_timeout)
def test_a_bad_wait_timeout_is_an_invalid_argument(q, bad) -> None:
    q.refused(lambda: jobs.accept(q.db, T, timeout=bad), jobs.InvalidArgument)
    q.refused(lambda: jobs.subscribe(q.db, T, "p", node=None, timeout=bad), jobs.InvalidArgument)
    q.refused(lambda: jobs.wait(_fake_subscription(), timeout=bad), jobs.InvalidArgument)


@FEW
@given(
    flag=st.one_of(st.integers(), st.none(), st.text(max_size=3), st.floats(), st.just([True])),
    when=st.integers(1, S.INT_MAX),
)
def test_bad_accept_flags_are_invalid_arguments(q, flag, when) -> None:
    q.refused(lambda: jobs.accept(q.db, T, timeout=0, no_schedule=flag), jobs.InvalidArgument)
    q.refused(lambda: jobs.accept(q.db, T, timeout=0, no_schedule=True, max_sched_time=when), jobs.InvalidArgument)


@SOME
@given(bad=S.bad_type_timeout)
def test_a_bad_type_timeout_is_an_invalid_argument(q, bad) -> None:
    q.refused(lambda: jobs.set_type_timeout(q.db, "t9", bad), jobs.InvalidArgument)
    q.refused(lambda: jobs.set_type_timeout(q.db, T, bad), jobs.InvalidArgument)


@FEW
@given(
    seconds=st.one_of(
        st.integers(1, int(MAX_TYPE_TIMEOUT)),
        st.floats(min_value=5e-324, max_value=MAX_TYPE_TIMEOUT),
        st.sampled_from([5e-324, 1e-9, 0.001, MAX_TYPE_TIMEOUT, int(MAX_TYPE_TIMEOUT)]),
    )
)
def test_odd_valid_type_timeouts_round_trip(q, seconds) -> None:
    jobs.set_type_timeout(q.db, "t8", seconds)
    try:
        got = jobs.get_type_timeout(q.db, "t8")
        assert got == seconds and got > 0 and math.isfinite(got)
    finally:
        jobs.clear_type_timeout(q.db, "t8")


@SOME
@given(bad=S.bad_handle)
def test_anything_but_a_database_or_transaction_is_an_invalid_argument(q, bad) -> None:
    for call in [
        lambda: jobs.add(bad, T, "j", {}),
        lambda: jobs.remove(bad, T, "p"),
        lambda: jobs.get_job_data(bad, T, "p"),
        lambda: jobs.get_job_state(bad, T, "p"),
        lambda: jobs.get_job(bad, T, "p"),
        lambda: jobs.get_jobs(bad, T),
        lambda: jobs.get_types(bad),
        lambda: jobs.accept(bad, T, timeout=0),
        lambda: jobs.update(bad, q.job),
        lambda: jobs.finish(bad, q.job),
        lambda: jobs.resubmit(bad, q.job),
        lambda: jobs.set_type_timeout(bad, "t9", 5),
        lambda: jobs.clear_type_timeout(bad, T),
        lambda: jobs.get_type_timeout(bad, T),
        lambda: jobs.subscribe(bad, T, "p", node=None),
        lambda: next(jobs.subscribe_task(None, bad, T, "p")),
    ]:
        q.refused(call, jobs.InvalidArgument)


def test_calls_that_take_a_database_refuse_a_transaction(q) -> None:
    tr = q.db.create_transaction()
    try:
        for call in [
            lambda: jobs.accept(tr, T, timeout=0),
            lambda: jobs.set_type_timeout(tr, "t9", 1),
            lambda: jobs.clear_type_timeout(tr, T),
            lambda: jobs.get_type_timeout(tr, T),
        ]:
            q.refused(call, jobs.InvalidArgument)
    finally:
        tr.cancel()


def test_a_used_transaction_is_refused_and_writes_nothing(q) -> None:
    committed = q.db.create_transaction()
    jobs.get_job_state(committed, T, "p")
    committed.commit()
    cancelled = q.db.create_transaction()
    cancelled.cancel()
    for tr in (committed, cancelled):
        q.refused(lambda: jobs.add(tr, T, "late", {}), StoreError)
        q.refused(lambda: jobs.remove(tr, T, "p"), StoreError)
        q.refused(lambda: jobs.update(tr, q.job, {"late": 1}), StoreError)


class NotAJob(enum.Enum):
    X = 1


@SOME
@given(
    bad=st.one_of(
        st.builds(
            Job,
            st.just(T),
            st.just("r"),
            st.one_of(
                st.just(""), st.none(), st.integers(), st.binary(max_size=3), st.lists(st.text(max_size=2), max_size=1)
            ),
        ),
        st.tuples(st.just(T), st.just("r"), st.text(max_size=4)),
        st.dictionaries(st.sampled_from(["type", "id", "lock"]), st.text(max_size=3)),
        st.text(max_size=4),
        st.none(),
        st.integers(),
        st.just(NotAJob.X),
        st.builds(S.Opaque),
    )
)
def test_a_bad_job_handle_is_an_invalid_argument(q, bad) -> None:
    q.refused(lambda: jobs.update(q.db, bad), jobs.InvalidArgument)
    q.refused(lambda: jobs.finish(q.db, bad), jobs.InvalidArgument)
    if not isinstance(bad, Job):  # resubmit does not check the lock, as in the seed
        q.refused(lambda: jobs.resubmit(q.db, bad), jobs.InvalidArgument)
        q.refused(lambda: jobs.is_resubmitted(bad), jobs.InvalidArgument)


@SOME
@given(
    lock=st.text(S.ODD_CHARS, min_size=1, max_size=40) | S.surrogate_text | st.just("x" * 200_000),
    data=st.none() | S.json_data,
)
def test_a_stale_or_forged_lock_is_a_halt(q, lock, data) -> None:
    assume(lock != q.job.lock)
    for job_id in ("r", "p", "f"):
        forged = Job(T, job_id, lock)
        q.refused(lambda: jobs.update(q.db, forged, data), jobs.Halt)
        q.refused(lambda: jobs.finish(q.db, forged, data), jobs.Halt)


# ------------------------------------------------------------- subscriptions


@SOME
@given(
    node=st.one_of(
        st.booleans(),
        st.integers(max_value=0),
        st.integers(min_value=65536),
        st.floats(),
        st.text(max_size=5),
        st.binary(max_size=2),
        st.builds(S.Opaque),
    )
)
def test_a_bad_node_is_an_invalid_argument(q, node) -> None:
    q.refused(lambda: jobs.subscribe(q.db, T, "p", node=node), jobs.InvalidArgument)


@SOME
@given(
    sub=st.one_of(
        st.none(),
        st.text(max_size=4),
        st.integers(),
        st.just([]),
        st.lists(st.text(max_size=2), min_size=1, max_size=2),
        st.builds(S.Opaque),
        st.tuples(st.just("ref"), st.just(T)),
    ),
    state=st.one_of(st.none(), st.text(max_size=8), st.integers(), st.just(b"running")),
)
def test_bad_subscriptions_and_states_are_invalid_arguments(q, sub, state) -> None:
    q.refused(lambda: jobs.unsubscribe(sub), jobs.InvalidArgument)
    q.refused(lambda: jobs.wait(sub, timeout=0), jobs.InvalidArgument)
    if state is not None and state not in ("pending", "running", "finished"):
        q.refused(lambda: jobs.wait(_fake_subscription(), state, timeout=0), jobs.InvalidArgument)
