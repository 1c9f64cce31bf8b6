"""Fresh job ids: UUID 7s that sort by the millisecond they were made."""

from __future__ import annotations

import uuid

import pytest

from actors.workers.client import enqueue, status
from fdblayer.jobs import ids
from fdblayer.jobs.ids import new_job_id


def test_a_fresh_id_is_32_hex_digits_of_a_uuid_7():
    job_id = new_job_id()
    assert len(job_id) == 32 and job_id == job_id.lower()
    parsed = uuid.UUID(job_id)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert parsed.hex == job_id


def test_ids_sort_by_their_millisecond_before_their_random_bits(monkeypatch: pytest.MonkeyPatch):
    clock = iter([1_795_000_000_000_000_000, 1_795_000_000_001_000_000])  # two instants 1 ms apart (ns)
    entropy = iter([b"\xff" * 10, b"\x00" * 10])  # the earlier id gets the largest random bits
    monkeypatch.setattr(ids.time, "time_ns", lambda: next(clock))
    monkeypatch.setattr(ids.os, "urandom", lambda n: next(entropy)[:n])
    earlier, later = new_job_id(), new_job_id()
    assert earlier < later
    assert int(earlier[:12], 16) == 1_795_000_000_000 and int(later[:12], 16) == 1_795_000_000_001
    assert uuid.UUID(earlier).version == uuid.UUID(later).version == 7


def test_ids_made_at_once_do_not_meet():
    made = [new_job_id() for _ in range(100_000)]
    assert len(set(made)) == len(made)


def test_an_enqueue_without_an_id_gets_a_fresh_uuid_7(sqlite_db):
    first = enqueue(sqlite_db, "emails", {"n": 1})
    assert uuid.UUID(first).version == 7
    assert status(sqlite_db, "emails", first).state == "pending"
