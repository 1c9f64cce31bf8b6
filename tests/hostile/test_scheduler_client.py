"""Hostile input to the scheduler through its client (``actors.scheduler.server.SchedulerClient``).

A bad job spec is ``InvalidJobSpec``, a bad setting ``InvalidSetting``, an
unknown job ``JobNotFound`` (or False/None where the call answers so), all
raised in the caller; the scheduler never crashes (its pid stays the same),
its settings and table stay as they were. Odd but valid specs round-trip.

One node for the module (``n``, with ``max_jobs = 0``: added jobs wait in
the table); the store is never touched by the scheduler.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from actors.scheduler.core import InvalidJobSpec, InvalidSetting, JobNotFound, SchedulerError

from . import strategies as S
from .node import IDLE

pytestmark = pytest.mark.timeout(120)


def _examples(count: int) -> settings:
    # ``unchanged`` is per test on purpose: it compares the scheduler before and after all the examples.
    return settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# Each call to the scheduler is a round trip to another process: modest counts.
FEW, SOME = _examples(8), _examples(25)
KEYS = ("max_jobs", "max_churn", "interval", "max_history", "health_threshold")
FIELDS = ("id", "handler", "source", "target", "continuous", "options", "db_name", "doc_id", "user", "start_time")


def refused(n, call: Callable[[], Any], error: type[BaseException]) -> BaseException:
    """``call`` raises ``error`` and the scheduler lives on (see ``unchanged`` for its state)."""
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, SchedulerError) and str(info.value)
    assert n.scheduler_pid() == n.scheduler, "the scheduler crashed"
    return info.value


@pytest.fixture
def unchanged(n):
    """After the test: the scheduler's table and settings are as before it."""
    jobs, before = n.s.jobs(), n.s.settings()
    yield
    assert n.s.jobs() == jobs and n.s.settings() == before
    assert n.scheduler_pid() == n.scheduler, "the scheduler crashed"


bad_str_field = st.one_of(
    st.integers(),
    st.floats(),
    st.booleans(),
    st.binary(max_size=3),
    st.lists(st.text(), max_size=1),
    st.builds(S.Opaque),
    st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=1),
)


@st.composite
def bad_spec(draw) -> Any:
    spec = {"id": draw(S.odd_id), "handler": IDLE}
    kind = draw(
        st.sampled_from(
            ["not_a_dict", "unknown", "id", "str_field", "handler", "nothing", "continuous", "options", "start_time"]
        )
    )
    if kind == "not_a_dict":
        return draw(
            st.one_of(
                st.none(),
                st.lists(st.integers(), max_size=2),
                st.text(max_size=3),
                st.integers(),
                st.tuples(st.just("id"), st.just("x")),
                st.builds(S.Opaque),
            )
        )
    if kind == "unknown":
        spec[draw(S.odd_text.filter(lambda k: k not in FIELDS) | st.integers() | st.tuples(st.text(max_size=1)))] = 1
    elif kind == "id":
        spec["id"] = draw(S.bad_id.filter(lambda i: not isinstance(i, str) or not i))  # any non-empty str will do
    elif kind == "str_field":
        spec[draw(st.sampled_from(["handler", "source", "target", "db_name", "doc_id", "user"]))] = draw(bad_str_field)
    elif kind == "handler":
        spec["handler"] = draw(st.sampled_from(["", ":", "a:", ":b", "no_colon", "a.b"]))
        assume(spec["handler"] != "")  # "" counts as no handler: then source/target are needed
    elif kind == "nothing":
        del spec["handler"]
        spec.update(draw(st.fixed_dictionaries({}, optional={"source": S.odd_id, "target": S.odd_id})))
        assume(not ("source" in spec and "target" in spec))
    elif kind == "continuous":
        spec["continuous"] = draw(st.one_of(st.integers(), st.text(max_size=2), st.floats(allow_nan=False)))
    elif kind == "options":
        spec["options"] = draw(
            st.one_of(
                st.lists(st.integers(), max_size=2),
                st.text(max_size=2),
                st.integers(),
                st.dictionaries(st.integers() | st.tuples(st.text(max_size=1)), st.integers(), min_size=1, max_size=2),
            )
        )
    else:
        spec["start_time"] = draw(
            st.one_of(
                st.text(max_size=3), st.booleans(), st.lists(st.integers(), max_size=1), st.decimals(allow_nan=False)
            )
        )
    return spec


@SOME
@given(spec=bad_spec())
def test_a_bad_job_spec_is_refused_in_the_caller(n, unchanged, spec) -> None:
    refused(n, lambda: n.s.add_job(spec), InvalidJobSpec)


def _a_count(text: str) -> bool:
    """What the scheduler takes for a count, as int() reads it (" 7", "+7", "1_0", "\u0667")."""
    try:
        return int(text) >= 0
    except ValueError:
        return False


@SOME
@given(
    key=st.sampled_from(KEYS),
    value=st.one_of(
        st.floats(),
        st.booleans(),
        st.none(),
        st.text(S.ODD_CHARS, max_size=6).filter(lambda t: not _a_count(t)),
        st.integers(max_value=-1),
        st.lists(st.integers(), max_size=1),
        st.builds(S.Opaque),
        st.decimals(allow_nan=False, allow_infinity=False).filter(lambda d: d != d.to_integral_value()),
        st.sampled_from(["1.5", "1e3", "0x10", "", " ", "9" * 5000]),
    ),
)
def test_a_bad_setting_is_refused_in_the_caller(n, unchanged, key, value) -> None:
    refused(n, lambda: n.s.set_setting(key, value), InvalidSetting)


@SOME
@given(
    key=st.one_of(S.odd_text.filter(lambda k: k not in KEYS), st.integers(), st.none(), st.tuples(st.text(max_size=2)))
)
def test_an_unknown_setting_is_refused_in_the_caller(n, unchanged, key) -> None:
    refused(n, lambda: n.s.set_setting(key, 1), InvalidSetting)


@SOME
@given(
    job_id=st.one_of(
        S.odd_text,
        st.integers(),
        st.floats(allow_nan=False),
        st.none(),
        st.booleans(),
        st.tuples(st.integers()),
        st.binary(max_size=3),
        st.frozensets(st.integers(), max_size=2),
    )
)
def test_unknown_jobs_are_not_found_and_change_nothing(n, unchanged, job_id) -> None:
    refused(n, lambda: n.s.job(job_id), JobNotFound)
    assert n.s.remove_job(job_id) is False
    assert n.s.job_summary(job_id) is None
    assert n.s.job_address(job_id) is None
    assert n.scheduler_pid() == n.scheduler


@FEW
@given(
    ids=st.lists(S.odd_id, max_size=4, unique=True),
    limit=st.integers(0, 5) | st.just(2**80),
    skip=st.integers(0, 5) | st.just(2**80),
)
def test_odd_pages_are_slices_in_id_order(n, ids, limit, skip) -> None:
    try:
        for job_id in ids:
            n.s.add_job({"id": job_id, "handler": IDLE})
        total, page = n.s.jobs_page(limit, skip)
        assert total == len(ids)
        assert [j["id"] for j in page] == sorted(ids)[skip : skip + limit]
    finally:
        n.undo()


@FEW
@given(
    job_id=st.text(S.ODD_CHARS, min_size=1, max_size=30),
    options=S.json_data,
    continuous=st.booleans(),
    kind=st.sampled_from(["handler", "replicate"]),
    user=st.none() | S.odd_text,
    start_time=st.none() | st.integers(0, 2**32) | st.floats(0, 4e9),
)
def test_odd_valid_specs_round_trip(n, job_id, options, continuous, kind, user, start_time) -> None:
    spec: dict = {"id": job_id, "continuous": continuous, "options": options, "user": user, "start_time": start_time}
    if kind == "handler":
        spec["handler"] = IDLE
    else:
        spec.update(source="http://adm:pw@example.invalid/a", target="x")
    try:
        assert n.s.add_job(spec) == job_id
        job = n.s.job(job_id)
        assert job["id"] == job_id and job["continuous"] == continuous and job["user"] == user
        assert job["pid"] is None  # max_jobs is 0: it waits
        assert n.s.job_summary(job_id)["state"] == "pending"
        if start_time is not None:
            assert job["start_time"].endswith("Z")
        assert [j["id"] for j in n.s.jobs()] == [job_id]
        assert n.s.remove_job(job_id) is True
        refused(n, lambda: n.s.job(job_id), JobNotFound)
    finally:
        n.undo()
    assert n.scheduler_pid() == n.scheduler


@pytest.mark.parametrize("value", [2**63 - 1, 2**63, 10**30, str(10**30), "9" * 4000], ids=lambda v: repr(v)[:20])
def test_huge_counts_are_taken_or_refused_never_a_crash(n, value) -> None:
    try:
        for key in ("max_jobs", "max_churn", "max_history"):
            try:
                assert n.s.set_setting(key, value) == int(value)
            except InvalidSetting as exc:
                assert exc.key == key
            n.s.reschedule()
            assert n.scheduler_pid() == n.scheduler, "the scheduler crashed"
    finally:
        n.undo()
    assert n.s.settings() == n.settings and n.scheduler_pid() == n.scheduler


def test_nan_setting_is_not_an_integer(n, unchanged) -> None:
    refused(n, lambda: n.s.set_setting("max_jobs", math.nan), InvalidSetting)


@pytest.mark.parametrize(
    "key, value",
    [
        ("max_churn", 0),
        ("interval", 0),
        ("interval", 2**32),  # out of the schema's bounds (a timer's limit)
        ("max_jobs", 2.0),
        ("max_jobs", True),
        (["max_jobs"], 1),
        ("doc_owner_timeout", 5),  # the config file's only: not a scheduler setting
    ],
    ids=repr,
)
def test_values_out_of_bounds_or_of_another_kind_are_refused(n, unchanged, key, value) -> None:
    refused(n, lambda: n.s.set_setting(key, value), InvalidSetting)


@pytest.mark.parametrize("message", [("bogus",), {"add_job": 1}, "reschedule!", 42, None])
def test_unknown_calls_casts_and_infos_are_ignored_as_in_the_seed(n, unchanged, message) -> None:
    """The seed's scheduler ignores messages it does not know; ours answers an
    unknown call with an error (rather than leaving its caller to time out)."""
    from actors.names import SCHEDULER

    err = refused(n, lambda: n.client.call(SCHEDULER, message, 5.0), SchedulerError)
    assert "not a scheduler call" in str(err)
    n.client.cast(SCHEDULER, message)
    n.client.send(SCHEDULER, message)
    assert n.s.settings() and n.scheduler_pid() == n.scheduler  # answered after both: still the same process
