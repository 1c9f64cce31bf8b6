"""Hostile input to the permanent jobs API (``actors.docs``: put, get, delete, list_docs, view;
``fdblayer.docs``: check_body, renew, queue_job_id).

Bad input raises ``InvalidArgument`` or ``EncodingError`` (``NotFound`` and
``Conflict`` where documented), all :class:`actors.jobs.JobsError`, and
leaves the SQLite store as it was (every row, read raw; no commit). Odd but
valid documents round-trip: put, get, list, view (as JSON), delete.

One real SQLite file for the module, holding two documents.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import fdblayer
from actors import docs, jobs
from fdblayer.docs import leases as doc_leases
from fdblayer import docs as store_docs

from . import strategies as S
from .store import StoreFile, same_json, unchanged

pytestmark = pytest.mark.timeout(120)

FEW = settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
BODY = {"handler": "tests.actors.scheduler_fixtures:idle", "continuous": True}
DB = docs.REPLICATOR_DB


class D:
    def __init__(self, store: StoreFile) -> None:
        self.store = store
        self.db = fdblayer.open(store.url)
        self.rev = docs.put(self.db, DB, "kept", dict(BODY, options={"n": 1}))
        docs.put(self.db, "team/_replicator", "other", {"source": "http://a/db", "target": {"url": "http://b/db"}})

    def refused(self, call: Callable[[], Any], error: Any = (docs.InvalidArgument, docs.EncodingError)) -> None:
        if isinstance(error, tuple):
            err = unchanged(self.store, call, jobs.JobsError)
            assert isinstance(err, error), f"{type(err).__name__}: {err}"
        else:
            unchanged(self.store, call, error)


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    handle = D(StoreFile(tmp_path_factory.mktemp("hostile-docs") / "store.db"))
    try:
        yield handle
    finally:
        handle.db.close()
        handle.store.close()


def test_every_public_function_is_covered() -> None:
    public = {
        name for name in docs.__all__ if callable(getattr(docs, name)) and not isinstance(getattr(docs, name), type)
    }
    assert public <= {"put", "get", "delete", "list_docs", "view"}, public


def test_errors_are_jobs_errors() -> None:
    for error in (docs.InvalidArgument, docs.EncodingError, docs.NotFound, docs.Conflict):
        assert issubclass(error, jobs.JobsError)


# ------------------------------------------------------------------ names

bad_db_name = st.one_of(
    S.bad_id,
    S.odd_text.filter(lambda s: s != DB and not s.endswith("/" + DB)),
    st.just("_replicatorx"),
    st.just("x/_replicator/"),
    st.just(" _replicator"),
    st.tuples(S.surrogate_text, st.just("/_replicator")).map("".join),
)
bad_doc_id = st.one_of(
    S.bad_id,
    st.tuples(st.just("_"), S.odd_text).map("".join),
    st.integers(5000, 12_000).map(lambda n: "d" * n),
    st.integers(1700, 4000).map(lambda n: "\x00" * n),  # six bytes each once escaped as JSON
)


@SOME
@given(bad=bad_db_name)
@example(bad="elsewhere")
def test_a_bad_database_name_is_an_invalid_argument(d, bad) -> None:
    for call in [
        lambda: docs.put(d.db, bad, "x", BODY),
        lambda: docs.get(d.db, bad, "kept"),
        lambda: docs.delete(d.db, bad, "kept"),
    ]:
        d.refused(call, docs.InvalidArgument)


@SOME
@given(bad=bad_doc_id)
@example(bad="_design")
@example(bad="")
@example(bad="x" * 20_000)
def test_a_bad_doc_id_is_an_invalid_argument(d, bad) -> None:
    for call in [
        lambda: docs.put(d.db, DB, bad, BODY),
        lambda: docs.get(d.db, DB, bad),
        lambda: docs.delete(d.db, DB, bad),
    ]:
        d.refused(call, docs.InvalidArgument)


@SOME
@given(doc_id=S.odd_id.filter(lambda s: not s.startswith("_")))
def test_unknown_documents_are_not_found(d, doc_id) -> None:
    assume(doc_id != "kept")
    d.refused(lambda: docs.get(d.db, DB, doc_id), docs.NotFound)
    d.refused(lambda: docs.delete(d.db, DB, doc_id), docs.NotFound)
    d.refused(lambda: docs.delete(d.db, DB, doc_id, rev=d.rev), docs.NotFound)


# ------------------------------------------------------------------ bodies

not_a_url = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.just(""),
    st.lists(st.text(), max_size=1),
    st.dictionaries(st.sampled_from(["uri", "href"]), st.text(max_size=3), max_size=1),
    st.fixed_dictionaries({"url": st.one_of(st.integers(), st.just(""), st.none(), st.booleans())}),
)
bad_body = st.one_of(
    st.one_of(S.json_value.filter(lambda v: not isinstance(v, dict)), S.bad_leaf, st.none()),  # not a dict
    st.just({}),
    st.fixed_dictionaries({"continuous": st.just(True)}),  # nothing to run
    st.fixed_dictionaries(
        {
            "handler": st.one_of(
                st.sampled_from(["", ":", "a:", ":b", "no_colon", "a.b"]),
                st.integers(),
                st.booleans(),
                st.lists(st.text(), max_size=1),
                st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=1),
            )
        }
    ),
    st.fixed_dictionaries({"source": not_a_url, "target": st.just("http://b/db")}),
    st.fixed_dictionaries({"source": st.just("http://a/db"), "target": not_a_url}),
    st.fixed_dictionaries({"source": st.just("http://a/db")}),
    st.fixed_dictionaries(
        {
            "handler": st.just(BODY["handler"]),
            "continuous": st.one_of(st.integers(), st.text(max_size=4), st.none(), st.floats(allow_nan=False)),
        }
    ).filter(lambda b: b["continuous"] is not None),
    st.fixed_dictionaries(
        {
            "handler": st.just(BODY["handler"]),
            "options": st.one_of(
                st.lists(st.integers(), max_size=2), st.text(max_size=3), st.integers(), st.booleans()
            ),
        }
    ),
    S.data_with_one_bad_value()
    .filter(lambda data: "_id" not in data and "_rev" not in data)
    .map(lambda data: dict(data, **BODY)),
    st.integers(64_100, 99_000).map(lambda n: dict(BODY, big="x" * n)),
    st.integers(32_100, 50_000).map(lambda n: dict(BODY, big="\u00e9" * n)),  # two bytes each
)


@SOME
@given(body=bad_body, doc_id=st.sampled_from(["kept", "new"]))
@example(body=["not", "a", "dict"], doc_id="new")
@example(body={"source": "only"}, doc_id="new")
@example(body={"handler": "no-colon"}, doc_id="new")
@example(body={"handler": "m:f", "continuous": "yes"}, doc_id="new")
@example(body={"handler": "m:f", "options": {"s": {1, 2}}}, doc_id="new")
@example(body={"handler": "m:f", "blob": "x" * 70_000}, doc_id="new")
def test_a_bad_body_is_refused_and_writes_nothing(d, body, doc_id) -> None:
    d.refused(lambda: docs.put(d.db, DB, doc_id, body))
    d.refused(lambda: docs.put(d.db, DB, doc_id, body, rev=d.rev, check_rev=True))


@SOME
@given(
    rev=st.one_of(
        st.integers(),
        st.floats(),
        st.binary(max_size=3),
        st.lists(st.text(max_size=3), max_size=1),
        st.booleans(),
        st.builds(S.Opaque),
    )
)
def test_a_rev_that_is_not_a_str_is_an_invalid_argument(d, rev) -> None:
    d.refused(lambda: docs.put(d.db, DB, "kept", BODY, rev=rev, check_rev=True), docs.InvalidArgument)
    d.refused(lambda: docs.put(d.db, DB, "kept", dict(BODY, _rev=rev)), docs.InvalidArgument)
    d.refused(lambda: docs.delete(d.db, DB, "kept", rev=rev), docs.InvalidArgument)


@SOME
@given(rev=S.odd_text | S.surrogate_text | st.none())
def test_a_stale_rev_is_a_conflict(d, rev) -> None:
    assume(rev != d.rev)
    d.refused(lambda: docs.put(d.db, DB, "kept", BODY, rev=rev, check_rev=True), docs.Conflict)
    if rev is not None:
        d.refused(lambda: docs.delete(d.db, DB, "kept", rev=rev), docs.Conflict)


# ------------------------------------------------------------------ list_docs


@SOME
@given(
    limit=st.one_of(
        st.integers(max_value=-1),
        st.floats(),
        st.booleans(),
        st.text(max_size=3),
        st.decimals(allow_nan=False),
        st.builds(S.Opaque),
    ),
    skip=st.one_of(st.integers(max_value=-1), st.floats(), st.booleans(), st.text(max_size=3)),
    states=st.lists(S.odd_text.filter(lambda s: s not in docs.STATES), min_size=1, max_size=3),
    db_name=st.one_of(st.just(""), st.integers(), st.binary(max_size=2), S.surrogate_text),
)
def test_bad_list_arguments_are_invalid_arguments(d, limit, skip, states, db_name) -> None:
    d.refused(lambda: docs.list_docs(d.db, limit=limit), docs.InvalidArgument)
    d.refused(lambda: docs.list_docs(d.db, skip=skip), docs.InvalidArgument)
    d.refused(lambda: docs.list_docs(d.db, states=states), docs.InvalidArgument)
    d.refused(lambda: docs.list_docs(d.db, states=["running", *states]), docs.InvalidArgument)
    d.refused(lambda: docs.list_docs(d.db, db_name), docs.InvalidArgument)


@SOME
@given(
    limit=st.none() | st.integers(0, 5) | st.just(2**80),
    skip=st.integers(0, 5) | st.just(2**80),
    states=st.none() | st.lists(st.sampled_from(docs.STATES), max_size=3),
    db_name=st.none() | st.sampled_from([DB, "team/_replicator", "nothing/_replicator"]) | S.odd_id,
)
def test_odd_list_arguments_page_like_a_slice(d, limit, skip, states, db_name) -> None:
    everything = sorted(((doc.db_name, doc.doc_id), doc.state) for doc in docs.list_docs(d.db)[1])
    wanted = [
        key
        for key, state in everything
        if (db_name is None or key[0] == db_name) and (states is None or state in states)
    ]
    total, page = docs.list_docs(d.db, db_name, limit=limit, skip=skip, states=states)
    end = None if limit is None else skip + limit
    assert total == len(wanted)
    assert [(doc.db_name, doc.doc_id) for doc in page] == wanted[skip:end]


# ------------------------------------------------------------------ round trips

odd_body = st.builds(
    lambda extra, kind, cont, options: dict(extra, continuous=cont, options=options, **kind),
    S.json_data.map(
        lambda data: {
            k: v
            for k, v in data.items()
            if k not in ("handler", "source", "target", "continuous", "options", "_id", "_rev")
        }
    ),
    st.one_of(
        st.just({"handler": BODY["handler"]}),
        st.fixed_dictionaries({"source": S.odd_id, "target": st.one_of(S.odd_id, S.odd_id.map(lambda u: {"url": u}))}),
    ),
    st.booleans(),
    S.json_data,
)


@FEW
@given(
    db_name=st.one_of(st.just(DB), S.odd_text.map(lambda p: p + "/" + DB)),
    doc_id=S.odd_id.filter(lambda s: not s.startswith("_")),
    body=odd_body,
    again=odd_body,
)
def test_odd_valid_documents_round_trip(d, db_name, doc_id, body, again) -> None:
    assume((db_name, doc_id) not in ((DB, "kept"), ("team/_replicator", "other")))
    rev = docs.put(d.db, db_name, doc_id, body, check_rev=True)
    try:
        assert rev.startswith("1-")
        doc = docs.get(d.db, db_name, doc_id)
        assert (doc.db_name, doc.doc_id, doc.rev, doc.state) == (db_name, doc_id, rev, "initializing")
        assert same_json(body, doc.body)
        view = docs.view(doc)
        assert json.loads(json.dumps(view, allow_nan=False)) == view
        assert (view["database"], view["doc_id"], view["state"]) == (db_name, doc_id, "initializing")
        total, page = docs.list_docs(d.db, db_name)
        assert (db_name, doc_id) in [(x.db_name, x.doc_id) for x in page] and total >= 1
        rev2 = docs.put(d.db, db_name, doc_id, dict(again, _rev=rev), check_rev=True)
        assert rev2.startswith("2-") and same_json(again, docs.get(d.db, db_name, doc_id).body)
        unchanged(d.store, lambda: docs.put(d.db, db_name, doc_id, body, rev=rev, check_rev=True), docs.Conflict)
        deleted = docs.delete(d.db, db_name, doc_id, rev=rev2)
        assert deleted.startswith("3-")
    except BaseException:
        try:
            docs.delete(d.db, db_name, doc_id)
        except docs.NotFound:
            pass
        raise
    d.refused(lambda: docs.get(d.db, db_name, doc_id), docs.NotFound)
    queue_id = store_docs.queue_job_id(db_name, doc_id)
    d.refused(lambda: jobs.get_job(d.db, docs.DOCS_TYPE, queue_id), jobs.NotFound)


# ------------------------------------------------------------------ the store layer's own entry points


@SOME
@given(body=bad_body)
def test_check_body_refuses_what_put_refuses(d, body) -> None:
    d.refused(lambda: store_docs.check_body(body))


@SOME
@given(bad=S.bad_handle)
def test_renew_takes_a_database_only(d, bad) -> None:
    d.refused(lambda: doc_leases.renew(bad, [], {}, set(), 0.0), docs.InvalidArgument)


@SOME
@given(db_name=S.odd_text, doc_id=S.odd_text)
def test_queue_job_ids_round_trip_any_names(db_name, doc_id) -> None:
    assert store_docs.parse_queue_job_id(store_docs.queue_job_id(db_name, doc_id)) == (db_name, doc_id)
