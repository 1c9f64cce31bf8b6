"""The pools' work record: its error history is bounded so that a record
with the largest result and progress still fits one store value, and a
stored record that is not one reads as a fresh one."""

from __future__ import annotations

import msgpack

import fdblayer
from fdblayer.interface import MAX_VALUE_SIZE
from fdblayer.jobs import api, work
from fdblayer.jobs.codec import encode_data
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
from fdblayer.jobs.work_record import ERRORS_KEPT, HISTORY_LIMIT, HISTORY_TRACEBACK, WorkRecord, with_error


def _error(n: int, tb: int = 10) -> dict:
    return {"type": "ValueError", "message": f"failed {n}", "traceback": "x" * tb}


def test_each_failed_attempt_joins_the_history_oldest_first():
    record = WorkRecord(attempt=1)
    for n in range(1, 4):
        record = record._replace(attempt=n).end_attempt(None, None, _error(n), now=100.0 + n)
    assert [(e["attempt"], e["message"], e["at"]) for e in record.errors] == [
        (1, "failed 1", 101.0),
        (2, "failed 2", 102.0),
        (3, "failed 3", 103.0),
    ]
    assert record.end_attempt("succeeded", b"r", None, now=200.0).errors == record.errors, "a success adds nothing"
    assert WorkRecord.unpack(record.pack()).errors == record.errors


def test_the_history_keeps_the_newest_entries_and_cuts_long_tracebacks():
    errors: tuple = ()
    for n in range(ERRORS_KEPT + 5):
        errors = with_error(errors, n, float(n), _error(n, tb=50_000))
    assert len(errors) <= ERRORS_KEPT and errors[-1]["attempt"] == ERRORS_KEPT + 4
    assert [e["attempt"] for e in errors] == sorted(e["attempt"] for e in errors)
    assert all(len(e["traceback"]) <= HISTORY_TRACEBACK + 4 for e in errors)
    assert len(msgpack.packb(list(errors))) <= HISTORY_LIMIT


def test_a_record_with_the_largest_parts_fits_one_store_value():
    from actors.workers.context import PROGRESS_LIMIT, RESULT_LIMIT, RESULT_WRAPPER, TRACEBACK_LIMIT

    errors: tuple = ()
    for n in range(ERRORS_KEPT):
        errors = with_error(errors, n, 1.0, {"type": "E" * 200, "message": "m" * 2_000, "traceback": "t" * 9_000})
    record = WorkRecord(
        attempt=1000,
        max_attempts=1000,
        outcome="succeeded",
        result=b"r" * (RESULT_LIMIT + RESULT_WRAPPER),
        error={"type": "E", "message": "m" * 2_000, "traceback": "t" * TRACEBACK_LIMIT},
        progress={"p": "x" * PROGRESS_LIMIT},
        worker="h" * 300,
        started=1.0,
        ended=2.0,
        claimed=0.5,
        errors=errors,
    )
    assert len(record.pack()) < MAX_VALUE_SIZE


def test_a_malformed_history_reads_as_its_good_entries():
    raw = msgpack.packb({"a": 2, "x": [{"attempt": 1}, "junk", 3]}, use_bin_type=True)
    assert WorkRecord.unpack(raw).errors == ({"attempt": 1},)
    assert WorkRecord.unpack(msgpack.packb({"a": 1, "x": "nope"})).errors == ()


def _work_row(db, job_id: str):
    return fdblayer.transactional(lambda tr: tr.get(L.work_key("w", job_id)))(db)


def test_a_new_job_without_options_stores_no_record_and_a_re_added_one_starts_afresh(db):
    """An enqueue of a fresh id with no options of its own writes no work
    record (one row less a job: it reads as a fresh one); options are
    stored; a job added again by its id after a failed attempt gets a
    fresh record, not the old attempt's."""
    api.set_type_timeout(db, "w", 30)
    work.enqueue(db, L, "w", "plain", encode_data({}), 0, None, new_id=True)
    work.enqueue(db, L, "w", "opts", encode_data({}), 0, 5, time_limit=2.0, new_id=True)
    assert _work_row(db, "plain") is None
    assert WorkRecord.unpack(_work_row(db, "opts")) == WorkRecord(max_attempts=5, time_limit=2.0)
    (claimed,) = [c for c in work.claim(db, L, "w", 1e9, 10, "host", 3).claimed if c.job.id == "plain"] or [None]
    assert claimed is not None and claimed.attempt == 1
    error = {"type": "E", "message": "m", "traceback": ""}
    work.complete(db, L, [work.Outcome(claimed.job, work.OutcomeKind.FAIL, None, error, seconds=0.0)], 1e9)
    assert WorkRecord.unpack(_work_row(db, "plain")).outcome == "failed"
    work.enqueue(db, L, "w", "plain", encode_data({}), 0, None)
    assert WorkRecord.unpack(_work_row(db, "plain")) == WorkRecord(), "the old attempt's record is reset"


def test_out_of_range_stored_numbers_read_so_the_record_can_be_written_again():
    """Found by a review (reproduced): an attempt count of 1e300 read back,
    then its next write (msgpack) raised, so every step of the host failed
    while that job waited; an ended time of inf made removes and pruning
    raise. Numbers out of range read as missing, or the record as fresh."""
    poisoned = [
        ({"a": 1e300}, lambda r: r.attempt == 0),
        ({"a": 2**63}, lambda r: r.attempt == 0),
        ({"a": -3}, lambda r: r.attempt == 0),
        ({"a": 2, "m": 2**63}, lambda r: (r.attempt, r.max_attempts) == (2, None)),
        (
            {"a": 1, "f": float("inf"), "s": float("nan"), "k": -float("inf")},
            lambda r: (r.ended, r.started, r.claimed) == (None, None, None),
        ),
        ({"a": 1, "t": float("inf")}, lambda r: r.time_limit is None),
    ]
    for stored, expected in poisoned:
        record = WorkRecord.unpack(msgpack.packb(stored), "j")
        assert expected(record), (stored, record)
        assert WorkRecord.unpack(record.begin_attempt("h", 1.0).pack(), "j").attempt == record.attempt + 1
