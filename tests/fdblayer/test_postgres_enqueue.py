"""An enqueue of a fresh id on PostgreSQL is one round trip: the job is
taken to be absent and its type's rows to be what this process last saw,
and the commit checks both. When another client changed the type meanwhile
(its declared priority, its timeout) the guess fails the commit and the
retry reads: the job still lands once, with the type as it is. A real
server; the statements are counted at the transaction's read call."""

from __future__ import annotations

import pytest

import fdblayer
from fdblayer.jobs import api, type_controls, work
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
from actors.workers import client

T = "guessed"


@pytest.fixture
def db(pg_url):
    handle = fdblayer.open(pg_url)
    api.set_type_timeout(handle, T, 30)
    yield handle
    handle.close()


@fdblayer.transactional
def _priority(tr, job_id: str) -> int:
    (_state, _data, _record, _sched, priority) = work.read_many_tolerant(tr, L, T, [job_id])[0]
    return priority


def test_a_fresh_id_is_enqueued_without_a_read_once_the_type_was_seen(db, reads):
    first = client.enqueue(db, T, {"n": 1})  # the type not seen yet in this process: read
    assert reads
    reads.clear()
    second = client.enqueue(db, T, {"n": 2})
    assert reads == []  # one round trip: the commit
    assert {api.get_job_state(db, T, i).value for i in (first, second)} == {"pending"}


def test_a_type_changed_elsewhere_fails_the_guess_and_the_retry_reads(db, pg_url):
    client.enqueue(db, T, {})  # seen: priority 0
    other = fdblayer.open(pg_url)
    try:
        type_controls.set_type_priority(other, L, T, 7)  # another client declares one
    finally:
        other.close()
    job_id = client.enqueue(db, T, {})
    assert _priority(db, job_id) == 7
    again = client.enqueue(db, T, {})  # the new value is what is seen now
    assert _priority(db, again) == 7


def test_a_given_id_is_read_and_resubmits_a_job_that_exists(db, reads):
    client.enqueue(db, T, {})
    job_id = client.enqueue(db, T, {"v": 1}, id="mine")
    reads.clear()
    assert client.enqueue(db, T, {"v": 2}, id="mine") == job_id
    assert reads  # an id the caller gave may exist: read, never guessed
    assert api.get_job_data(db, T, job_id) == {"v": 2}
