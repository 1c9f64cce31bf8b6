"""Documents in the store (fdblayer.docs through actors.docs): no node needed."""

from __future__ import annotations

import time

import pytest

import fdblayer
from actors import docs, jobs
from fdblayer.docs import leases as doc_leases
from fdblayer import docs as store_docs

IDLE = {"handler": "tests.actors.scheduler_fixtures:idle", "continuous": True}


@pytest.fixture
def db(tmp_path):
    handle = fdblayer.open(f"sqlite:///{tmp_path}/store.db")
    yield handle
    handle.close()


def test_put_adds_a_queue_job_and_delete_removes_it(db):
    rev = docs.put(db, "_replicator", "a", IDLE)
    qid = store_docs.queue_job_id("_replicator", "a")
    assert jobs.get_job_state(db, docs.DOCS_TYPE, qid) == "pending"
    assert jobs.get_type_timeout(db, docs.DOCS_TYPE) == store_docs.DEFAULT_OWNER_TIMEOUT
    doc = docs.get(db, "_replicator", "a")
    assert (doc.rev, doc.body, doc.state, doc.error_count, doc.node) == (rev, IDLE, "initializing", 0, None)
    with pytest.raises(docs.Conflict):
        docs.put(db, "_replicator", "a", IDLE, rev="1-other", check_rev=True)
    rev2 = docs.put(db, "_replicator", "a", dict(IDLE, _rev=rev), check_rev=True)
    assert rev2.startswith("2-")
    docs.delete(db, "_replicator", "a")
    with pytest.raises(docs.NotFound):
        docs.get(db, "_replicator", "a")
    with pytest.raises(jobs.NotFound):
        jobs.get_job_state(db, docs.DOCS_TYPE, qid)


def test_list_is_sorted_paged_and_filtered(db):
    for i in (3, 1, 2, 0):
        docs.put(db, "_replicator", f"d{i}", IDLE)
    docs.put(db, "other/_replicator", "x", IDLE)
    total, page = docs.list_docs(db, "_replicator", limit=2, skip=1)
    assert total == 4 and [d.doc_id for d in page] == ["d1", "d2"]
    assert docs.list_docs(db)[0] == 5
    assert docs.list_docs(db, states=["running"]) == (0, [])
    with pytest.raises(docs.InvalidArgument):
        docs.list_docs(db, states=["bogus"])


def test_accept_renew_and_a_replaced_doc_going_back_to_the_queue(db):
    docs.put(db, "_replicator", "a", IDLE)
    (lease, doc), watch = doc_leases.accept(db, "n1", time.time())
    assert watch is None and doc.node == "n1" and doc.state == "initializing"
    found, watch = doc_leases.accept(db, "n2", time.time())
    assert found is None and watch is not None
    watch.cancel()
    out = doc_leases.renew(db, [lease], {lease.job.id: {"state": "running", "info": {"n": 1}}}, set(), time.time())
    outcome, lease = out[lease.job.id]
    assert outcome == doc_leases.KEPT and docs.get(db, "_replicator", "a").state == "running"
    docs.put(db, "_replicator", "a", {"handler": "m:f"})  # replaced while running
    assert doc_leases.renew(db, [lease], {}, set(), time.time())[lease.job.id][0] == doc_leases.CHANGED
    (again, doc), _ = doc_leases.accept(db, "n2", time.time())
    assert doc.body == {"handler": "m:f"} and doc.node == "n2"
    assert doc_leases.renew(db, [lease], {}, set(), time.time())[lease.job.id][0] == doc_leases.LOST
    out = doc_leases.renew(db, [again], {again.job.id: {"state": "completed"}}, {again.job.id}, time.time())
    assert out[again.job.id][0] == doc_leases.DONE
    assert jobs.get_job_state(db, docs.DOCS_TYPE, again.job.id) == "finished"


def test_a_document_replaced_during_its_hand_back_is_not_due_before_the_old_run_ended(db):
    docs.put(db, "_replicator", "a", IDLE)
    (lease, _), _ = doc_leases.accept(db, "n1", time.time())
    not_before = int(time.time()) + 60  # n1 stops cleanly: its run may go on until then
    assert doc_leases.release(db, [lease], not_before) == [lease.job.id]
    docs.put(db, "_replicator", "a", {"handler": "m:f"})
    found, watch = doc_leases.accept(db, "n2", time.time())
    assert found is None, "the new revision would start beside the old run's end"
    watch.cancel()
    (_, doc), _ = doc_leases.accept(db, "n2", not_before)
    assert doc.body == {"handler": "m:f"}


def test_a_document_replaced_while_it_runs_is_due_again_once_its_run_may_have_ended(db):
    docs.put(db, "_replicator", "a", IDLE)
    (lease, _), _ = doc_leases.accept(db, "n1", time.time())
    docs.put(db, "_replicator", "a", {"handler": "m:f"})
    not_before = int(time.time()) + 60  # when n1's run of the old revision has surely stopped
    outcome, _ = doc_leases.renew(db, [lease], {}, set(), time.time(), not_before=not_before)[lease.job.id]
    assert outcome == doc_leases.CHANGED
    found, watch = doc_leases.accept(db, "n2", time.time())
    assert found is None, "another node would start the new revision beside the old run's end"
    watch.cancel()
    (_, doc), _ = doc_leases.accept(db, "n2", not_before)
    assert doc.body == {"handler": "m:f"} and doc.node == "n2"


def test_a_replaced_document_waits_for_its_fallback_time_until_brought_forward(db):
    docs.put(db, "_replicator", "a", IDLE)
    (lease, _), _ = doc_leases.accept(db, "n1", time.time())
    docs.put(db, "_replicator", "a", {"handler": "m:f"})
    fallback, soon = int(time.time()) + 3600, int(time.time()) + 60
    assert doc_leases.renew(db, [lease], {}, set(), time.time(), not_before=fallback)[lease.job.id][0] == "changed"
    assert doc_leases.bring_forward(db, [lease.job.id, "missing"], soon) == [lease.job.id]
    assert doc_leases.bring_forward(db, [lease.job.id], soon + 10) == [], "never later than it is"
    found, watch = doc_leases.accept(db, "n2", soon - 1)
    assert found is None
    watch.cancel()
    (again, _), _ = doc_leases.accept(db, "n2", soon)
    assert doc_leases.bring_forward(db, [again.job.id], 0) == [], "a running job is left alone"


@pytest.mark.parametrize("held", [True, False], ids=["running", "handed_back"])
def test_a_document_deleted_and_created_again_is_not_due_beside_its_old_run(db, held):
    """CouchDB's way to restart a replication: DELETE, then PUT. The queue
    job of a running (or handed back) document stays, waiting for its old
    run, so the new document is not due at once; a deleted document's job
    is removed by the accept that finds it gone."""
    docs.put(db, "_replicator", "a", IDLE)
    (lease, _), _ = doc_leases.accept(db, "n1", time.time())
    not_before = int(time.time()) + 60
    if not held:
        doc_leases.release(db, [lease], not_before)
    docs.delete(db, "_replicator", "a")
    docs.put(db, "_replicator", "a", {"handler": "m:f"})
    if held:
        outcome, _ = doc_leases.renew(db, [lease], {}, set(), time.time(), not_before=not_before)[lease.job.id]
        assert outcome == doc_leases.CHANGED
    found, watch = doc_leases.accept(db, "n2", time.time())
    assert found is None, "the new document would start beside the old run's end"
    watch.cancel()
    (_, doc), _ = doc_leases.accept(db, "n2", not_before)
    assert doc.body == {"handler": "m:f"}


def test_a_deleted_document_s_queue_job_goes_once_its_old_run_has_ended(db):
    docs.put(db, "_replicator", "a", IDLE)
    (lease, _), _ = doc_leases.accept(db, "n1", time.time())
    docs.delete(db, "_replicator", "a")
    assert jobs.get_job_state(db, docs.DOCS_TYPE, lease.job.id) == "running", "it waits for its old run"
    due = int(time.time()) + 60
    assert doc_leases.renew(db, [lease], {}, set(), time.time(), not_before=due)[lease.job.id][0] == "changed"
    assert doc_leases.accept(db, "n2", due) == (None, None), "taken, found without its document, removed"
    with pytest.raises(jobs.NotFound):
        jobs.get_job_state(db, docs.DOCS_TYPE, lease.job.id)


@pytest.mark.parametrize("bad", [1.5, "10", -1, True])
def test_a_bad_not_before_is_refused_and_changes_nothing(db, bad):
    docs.put(db, "_replicator", "a", IDLE)
    (lease, _), _ = doc_leases.accept(db, "n1", time.time())
    docs.put(db, "_replicator", "a", {"handler": "m:f"})
    with pytest.raises(docs.InvalidArgument, match="not_before"):
        doc_leases.renew(db, [lease], {}, set(), time.time(), not_before=bad)
    with pytest.raises(docs.InvalidArgument, match="not_before"):
        doc_leases.release(db, [lease], bad)
    assert jobs.get_job_state(db, docs.DOCS_TYPE, lease.job.id) == "running"
    assert doc_leases.renew(db, [lease], {}, set(), time.time())[lease.job.id][0] == doc_leases.CHANGED


@pytest.mark.slow
def test_leases_renewed_together_are_each_re_enqueued_when_silent(db):
    from fdblayer.jobs import activity
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    n = doc_leases.RENEW_BATCH + 5  # two transactions, one of them with many jobs
    for i in range(n):
        docs.put(db, "_replicator", f"d{i:03d}", IDLE)
    leases = []
    while (found := doc_leases.accept(db, "n1", time.time())[0]) is not None:
        leases.append(found[0])
    assert len(leases) == n
    out = doc_leases.renew(db, leases, {}, set(), time.time())
    assert {outcome for outcome, _ in out.values()} == {doc_leases.KEPT}
    assert (
        len(
            activity.get_inactive_since(
                db, DEFAULT_LAYOUT, docs.DOCS_TYPE, activity.get_activity_vs(db, DEFAULT_LAYOUT, docs.DOCS_TYPE)
            )
        )
        == n
    )
    vs, _ = activity.check_inactive(db, DEFAULT_LAYOUT, docs.DOCS_TYPE, None)
    _, again = activity.check_inactive(db, DEFAULT_LAYOUT, docs.DOCS_TYPE, vs)  # all silent since vs
    assert sorted(again) == sorted(lease.job.id for lease in leases)
    states = {jobs.get_job_state(db, docs.DOCS_TYPE, lease.job.id) for lease in leases}
    assert states == {"pending"}


def test_a_documents_checkpoint_is_kept_across_accepts_and_bounded(db):
    """A renewal keeps the handler's checkpoint in the row, the next node's
    accept reads it; a value msgpack refuses, one over the bound, or one
    that would make the row too large leaves the last one kept (a renewal
    never fails for a handler's value); a new revision starts afresh."""
    big_body = dict(IDLE, options={"pad": "x" * 62_000})
    docs.put(db, "_replicator", "a", big_body)
    (lease, _), _ = doc_leases.accept(db, "n1", time.time())
    stats = {f"k{i}": "v" * 1_900 for i in range(12)}  # 23 KB: with the body, 15 KB short of the value limit

    def renew(checkpoint, info=stats):  # noqa: ANN001, ANN202
        nonlocal lease
        fields = {"state": "running", "checkpoint": checkpoint, "info": info}
        outcome, lease = doc_leases.renew(db, [lease], {lease.job.id: fields}, set(), 0)[lease.job.id]
        assert outcome == doc_leases.KEPT
        doc = docs.get(db, "_replicator", "a")
        return doc.checkpoint if info is stats else (doc.checkpoint, doc.info)

    assert renew({"n": 7}) == {"n": 7}
    assert renew({"n": object()}) == {"n": 7}, "not plain data: the last kept stays"
    assert renew("y" * (store_docs.MAX_CHECKPOINT_SIZE + 1)) == {"n": 7}, "over the bound"
    big = "z" * 15_000  # within the bound, but with the stats the row would pass the store's value limit
    assert renew(big, dict(stats)) == (big, doc_leases.INFO_TOO_LARGE), "the progress before the stats"
    too_many = {f"k{i}": "v" * 1_900 for i in range(40)}  # the stats alone no longer fit beside the body
    assert renew({"n": 8}, too_many) == ({"n": 8}, doc_leases.INFO_TOO_LARGE)
    assert doc_leases.release(db, [lease]) == [lease.job.id]
    (_, doc), _ = doc_leases.accept(db, "n2", time.time())
    assert doc.checkpoint == {"n": 8}, "the next node resumes from it"
    docs.put(db, "_replicator", "a", IDLE)
    assert docs.get(db, "_replicator", "a").checkpoint is None, "a new revision starts afresh"
