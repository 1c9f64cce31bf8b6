"""Each transition of a running job is written once, for a batch, so a batch
leaves the store as the same calls one job at a time would: the pools'
complete, release and renew, and the activity monitors' re-enqueue, run
on two real SQLite stores set up alike, once as one batch and once job by
job, end with the same rows (but for the watch stamps, which carry each
commit's versionstamp). The clock is passed in."""

from __future__ import annotations

import pytest

import fdblayer
from fdblayer.interface import strinc
from fdblayer.jobs import activity, api, model, work
from fdblayer.jobs.codec import encode_data
from fdblayer.jobs.exceptions import Halt
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
from fdblayer.jobs.keys import WATCHES_ACTIVITY, WATCHES_PENDING

T = "trans"
NOW = 1_700_000_000.0
IDS = [f"j{n}" for n in range(6)]


def _store(path):
    db = fdblayer.open(f"sqlite:///{path}?synchronous=NORMAL")
    api.set_type_timeout(db, T, 30)
    for job_id in IDS:
        work.enqueue(db, L, T, job_id, encode_data({"n": job_id}), 0, 3)
    return db


@pytest.fixture
def pair(tmp_path):
    a, b = _store(tmp_path / "a.db"), _store(tmp_path / "b.db")
    yield a, b
    a.close()
    b.close()


def _claim_all(db) -> list:
    result = work.claim(db, L, T, NOW, len(IDS), "host-1", 3)
    return sorted(result.claimed, key=lambda c: c.job.id)


def _rows(db) -> dict:
    """Every row but the watch stamps."""
    watches = {L.subspace(WATCHES_PENDING), L.subspace(WATCHES_ACTIVITY)}
    tr = db.create_transaction()
    found = {kv.key: kv.value for kv in tr.get_range(b"", b"\xff") if not any(kv.key.startswith(w) for w in watches)}
    tr.cancel()
    return found


def _outcomes(claimed: list) -> list:
    kinds = [work.OutcomeKind.OK, work.OutcomeKind.RETRY, work.OutcomeKind.FAIL, work.OutcomeKind.SNOOZE]
    error = {"type": "E", "message": "m", "traceback": ""}
    return [
        work.Outcome(c.job, kinds[n % len(kinds)], b"r", error, retry_at=int(NOW) + 60, seconds=0.01, started=NOW)
        for n, c in enumerate(claimed)
    ]


def test_complete_of_a_batch_writes_what_one_job_at_a_time_does(pair):
    a, b = pair
    outcomes_a, outcomes_b = _outcomes(_claim_all(a)), _outcomes(_claim_all(b))
    assert work.complete(a, L, outcomes_a, NOW + 1) == []
    for outcome in outcomes_b:
        assert work.complete(b, L, [outcome], NOW + 1) == []
    assert _rows(a) == _rows(b)
    states = {job_id: api.get_job_state(a, T, job_id).value for job_id in IDS}
    assert states == dict(zip(IDS, ["finished", "pending", "finished", "pending", "finished", "pending"], strict=True))


def test_release_and_re_enqueue_of_a_batch_write_what_one_job_at_a_time_does(pair):
    a, b = pair
    claimed_a, claimed_b = _claim_all(a), _claim_all(b)
    work.mark_started(a, L, [(c.job, NOW) for c in claimed_a[:3]])  # three handlers started, three did not
    work.mark_started(b, L, [(c.job, NOW) for c in claimed_b[:3]])
    assert work.release(a, L, [c.job for c in claimed_a[:2]]) == 2
    for c in claimed_b[:2]:
        assert work.release(b, L, [c.job]) == 1
    rest = IDS[2:]
    assert activity.re_enqueue_inactive(a, L, T, rest + ["gone"], now=NOW + 2) == rest
    for job_id in rest + ["gone"]:
        activity.re_enqueue_inactive(b, L, T, [job_id], now=NOW + 2)
    assert _rows(a) == _rows(b)
    assert {api.get_job_state(a, T, job_id).value for job_id in IDS} == {"pending"}


def test_renew_of_a_batch_keeps_every_job_held_and_loses_none(pair):
    a, _ = pair
    claimed = _claim_all(a)
    before = {c.job.id: model.get_job(a, L, T, c.job.id).seq for c in claimed}
    assert work.renew(a, L, [c.job for c in claimed]) == []
    after = {c.job.id: model.get_job(a, L, T, c.job.id).seq for c in claimed}
    assert all(after[i] != before[i] for i in before)  # a fresh activity stamp each
    tr = a.create_transaction()
    activity_rows = tr.get_range(L.activity_prefix(T), strinc(L.activity_prefix(T)))
    tr.cancel()
    assert len(activity_rows) == len(IDS)  # the old stamps cleared, one row a job
    api.finish(a, claimed[0].job)  # the renewed handle still holds the job
    with pytest.raises(Halt):
        api.finish(a, claimed[0].job)
