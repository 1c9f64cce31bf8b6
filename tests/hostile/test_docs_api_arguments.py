"""Hostile arguments of the docs API: each is an InvalidArgument and writes nothing.

Handles that are not databases, bad ``states``, ``skip=None``, a ``now``
no date can show, non-bool ``check_rev``: each once raised ``TypeError``
(or stored a document that ``view`` could not show).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fdblayer
from actors import docs, jobs

from . import strategies as S
from .store import StoreFile, unchanged

pytestmark = pytest.mark.timeout(120)

BODY = {"handler": "tests.actors.scheduler_fixtures:idle"}
DB = docs.REPLICATOR_DB
FEW = settings(max_examples=30, deadline=None, database=None)


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    store = StoreFile(tmp_path_factory.mktemp("pending-docs") / "store.db")
    db = fdblayer.open(store.url)
    docs.put(db, DB, "kept", BODY)
    try:
        yield store, db
    finally:
        db.close()
        store.close()


@FEW
@given(bad=S.bad_handle)
def test_a_handle_that_is_not_a_database_is_an_invalid_argument(d, bad) -> None:
    """put/get/delete/list_docs check the handle before @transactional sees it."""
    store, _ = d
    for call in [
        lambda: docs.put(bad, DB, "x", BODY),
        lambda: docs.get(bad, DB, "kept"),
        lambda: docs.delete(bad, DB, "kept"),
        lambda: docs.list_docs(bad),
    ]:
        unchanged(store, call, docs.InvalidArgument)


@FEW
@given(
    states=st.one_of(
        st.integers(),
        st.floats(),
        st.none().map(lambda _: object()),  # not iterable
        st.lists(st.lists(st.text(max_size=2), max_size=1), min_size=1, max_size=2),  # unhashable items
        st.tuples(st.integers(), S.odd_text).map(list),  # unsortable mix
        st.tuples(st.none(), st.just("bogus")).map(list),
    )
)
def test_bad_states_are_an_invalid_argument(d, states) -> None:
    """list_docs: states must be an iterable of known state names."""
    store, db = d
    unchanged(store, lambda: docs.list_docs(db, states=states), docs.InvalidArgument)


def test_skip_none_is_an_invalid_argument(d) -> None:
    """list_docs: skip is an int (limit alone may be None)."""
    store, db = d
    unchanged(store, lambda: docs.list_docs(db, skip=None), docs.InvalidArgument)


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf, 1e300, -1e300, "x", b"1", [1], True], ids=repr)
def test_a_bad_now_is_an_invalid_argument(d, now) -> None:
    """put: ``now`` becomes last_updated, so it must be a time docs.view can show."""
    store, db = d
    try:
        unchanged(store, lambda: docs.put(db, DB, "when", BODY, now=now), docs.InvalidArgument)
    finally:
        try:
            docs.delete(db, DB, "when")
        except docs.NotFound:
            pass


@pytest.mark.parametrize("flag", ["yes", 1, 0, None, [True]], ids=repr)
def test_check_rev_must_be_a_bool(d, flag) -> None:
    """put: check_rev is a bool, as every flag of the jobs API (check_flag)."""
    store, db = d
    unchanged(store, lambda: docs.put(db, DB, "flag", BODY, check_rev=flag), jobs.InvalidArgument)


@pytest.mark.parametrize(
    "doc_id, message",
    [
        ("", "doc id must not be empty"),
        (7, "doc id must be a str, not int: 7"),
        ("x" * 10_000, "database name and doc id are too long: their longest key would be about "),
    ],
)
def test_a_bad_doc_id_says_what_is_wrong(d, doc_id, message) -> None:
    store, db = d
    err = unchanged(store, lambda: docs.put(db, DB, doc_id, BODY), docs.InvalidArgument)
    assert str(err).startswith(message), str(err)
