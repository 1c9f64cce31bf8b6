"""A commit sent apart (``Transaction.start_commit``), a transactional call
whose commit is answered later (``fdblayer.pipelined.Pipelined``), and
the conflicts between a commit in flight and a transaction begun
meanwhile, on every backend (``conftest.py``).

What a caller relies on: ``finish()`` ends as ``commit`` does; a
transaction that began before a commit was answered, and commits after
it, conflicts with its writes as with any other commit's (on PostgreSQL the commit is held on
the server here, by a lock on its commit-order row, so that the later
transaction's reads do come first); ``Pipelined.wait`` returns the result
of the attempt that committed, retrying as ``transactional`` does.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import psycopg
import pytest

import fdblayer
from fdblayer import transactional
from fdblayer.exceptions import ConflictError
from fdblayer.jobs import api, work
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
from fdblayer.pipelined import Pipelined
from actors.workers import client

T = "stepped"


@contextlib.contextmanager
def commits_held(db) -> Iterator[bool]:
    """On PostgreSQL, hold every commit of ``db``'s store on the server
    (its commit-order row locked by another session) until the block
    ends; yields whether commits are held (elsewhere they are not)."""
    prefix = getattr(db, "prefix", None)
    if prefix is None or not hasattr(db, "conninfo"):
        yield False
        return
    with psycopg.connect(db.conninfo) as conn:
        conn.execute(f"SELECT value FROM \"{prefix}_meta\" WHERE name = 'commit_version' FOR UPDATE")
        yield True
        conn.rollback()


def test_finish_ends_a_commit_as_commit_does(db):
    tr = db.create_transaction()
    tr.set(b"k", b"v")
    stamp = tr.get_versionstamp()
    flight = tr.start_commit()
    flight.finish()
    flight.finish()  # a second call is a no-op
    assert db.get(b"k") == b"v"
    assert len(stamp.wait()) == 10


def test_a_read_only_transaction_sends_nothing(db):
    tr = db.create_transaction()
    assert tr.get(b"nothing") is None
    flight = tr.start_commit()
    assert flight.fileno() is None
    flight.finish()


def test_a_transaction_begun_while_a_commit_is_in_flight_conflicts_with_its_writes(db, store_url):
    db.set(b"shared", b"old")
    other = fdblayer.open(store_url)
    try:
        first = db.create_transaction()
        first.set(b"shared", b"first")
        with commits_held(db) as held:
            flight = first.start_commit()
            if held:
                assert flight.fileno() is not None
            second = other.create_transaction()
            seen = second.get(b"shared")
            second.set(b"elsewhere", b"second")
        flight.finish()
        later = second.start_commit()  # after the first's answer (two commits sent at once may go in either order)
        assert seen == b"old" or not held  # held: the second's reads came first
        if seen == b"old":  # its reads came before the first commit: they conflict
            with pytest.raises(ConflictError):
                later.finish()
            assert other.get(b"elsewhere") is None
        else:  # answered at once (no commit in flight): read after it, no conflict
            assert not held
            later.finish()
            assert other.get(b"elsewhere") == b"second"
    finally:
        other.close()
    assert db.get(b"shared") == b"first"


def test_a_transaction_begun_meanwhile_that_reads_other_keys_commits(db, store_url):
    other = fdblayer.open(store_url)
    try:
        first = db.create_transaction()
        first.set(b"a", b"1")
        first.clear_range(b"r/", b"r0")
        with commits_held(db):
            flight = first.start_commit()
            second = other.create_transaction()
            assert second.get(b"a\x00") is None  # the key after "a": no overlap
            assert second.get_range(b"r0", b"r1") == []  # the range after the clear's
            second.set(b"b", b"2")
        flight.finish()
        second.start_commit().finish()
    finally:
        other.close()
    assert db.get(b"a") == b"1" and db.get(b"b") == b"2"


@pytest.mark.parametrize(
    "read, write",
    [
        ("key", "key"),  # the same key
        ("range", "key"),  # a range read over a key written
        ("key", "clear"),  # a key inside a range cleared
        ("range", "clear"),  # a range read over part of a range cleared
    ],
)
def test_each_kind_of_overlap_conflicts(db, store_url, read, write):
    db.set(b"m/5", b"x")
    other = fdblayer.open(store_url)
    try:
        tr = other.create_transaction()
        if read == "key":
            tr.get(b"m/5")
        else:
            tr.get_range(b"m/3", b"m/7")
        tr.set(b"out", b"1")
        writer = db.create_transaction()
        if write == "key":
            writer.set(b"m/5", b"y")
        else:
            writer.clear_range(b"m/4", b"m/9")
        writer.commit()
        with pytest.raises(ConflictError):
            tr.commit()
    finally:
        other.close()


def test_pipelined_returns_the_result_of_the_attempt_that_committed(db, store_url):
    other = fdblayer.open(store_url)
    attempts: list = []

    @transactional
    def body(tr, suffix):
        value = tr.get(b"c")
        attempts.append(value)
        if len(attempts) == 1:
            other.set(b"c", b"other")
        tr[b"c"] = (value or b"") + suffix
        return len(attempts)

    try:
        call = Pipelined(body, db, b"+mine")
        assert call.tentative == 1
        call.send()
        assert call.wait() == 2
    finally:
        other.close()
    assert attempts == [None, b"other"]
    assert db.get(b"c") == b"other+mine"


def test_pipelined_raises_what_no_retry_mends_and_writes_nothing(db):
    @transactional
    def body(tr):
        tr[b"x"] = b"1"
        raise KeyError("not a store error")

    with pytest.raises(KeyError):
        Pipelined(body, db)
    assert db.get(b"x") is None


def test_pipelined_keeps_a_retryable_failure_of_its_body_for_wait(db):
    calls: list = []

    @transactional
    def body(tr):
        calls.append(1)
        if len(calls) == 1:
            raise ConflictError("forced")
        tr[b"y"] = b"1"
        return "done"

    call = Pipelined(body, db)
    assert call.tentative is None and call.fileno() is None
    assert call.wait() == "done"
    assert len(calls) == 2 and db.get(b"y") == b"1"


def test_a_step_built_beside_one_in_flight_takes_other_jobs_and_commits_at_once(db):
    """``work.step``'s ``skip``: the second step's reads come before the
    first step's commit (held), so they still see the jobs it took; passed
    over, none is taken twice and the second commits at its first attempt
    (the jobs it meant to claim are the ones it claimed)."""
    api.set_type_timeout(db, T, 30)
    enqueued = {client.enqueue(db, T, {"n": n}) for n in range(20)}
    now = time.time() + 1
    with commits_held(db):
        first = Pipelined(work.step, db, L, [], [], [(T, 10, 3)], now, "h")
        first.send()
        taken = frozenset(k for r in first.tentative[1] for k in r.keys)
        second = Pipelined(work.step, db, L, [], [], [(T, 10, 3)], now, "h", None, taken)
        meant = {c.job.id for c in second.tentative[1][0].claimed}
    _, (a,) = first.wait()
    second.send()
    _, (b,) = second.wait()
    first_ids, second_ids = {c.job.id for c in a.claimed}, {c.job.id for c in b.claimed}
    assert len(taken) == 10 and len(first_ids) == len(second_ids) == 10
    assert first_ids | second_ids == enqueued
    assert second_ids == meant
