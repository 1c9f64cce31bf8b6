"""What a worker host's step reads on PostgreSQL, where reads are round trips.

A step prefetches, in one statement, the rows it will read: the ended
jobs', each claimed type's due range (its first ``claim_spread(want)``
rows, from which a claim picks at random), the probe of the other
priorities and the next due job. Then it reads the picked jobs' rows and
commits. These tests count the read statements at the transaction's read
call (a real server) and check which due jobs a small claim picks among.
"""

from __future__ import annotations

import random
import time

import pytest

import fdblayer
from fdblayer.jobs import api, work
from fdblayer.jobs.due import claim_spread
from fdblayer.jobs.keys import DEFAULT_LAYOUT as L
from actors.workers import client

T = "stepped"


@pytest.fixture
def db(pg_url):
    handle = fdblayer.open(pg_url)
    api.set_type_timeout(handle, T, 30)
    yield handle
    handle.close()


def test_a_claim_of_a_few_jobs_picks_among_the_first_of_the_spread(db):
    """One job is picked among the first 64 due (not 256): reading a quarter
    of the rows is what a host of slow jobs saves on every step."""
    assert claim_spread(1) == 64 and claim_spread(4) == 128 and claim_spread(8) == 256
    assert claim_spread(300) == 300
    due = sorted(client.enqueue(db, T, {"n": n}) for n in range(300))  # due now: in id order
    rng = random.Random(7)
    seen = set()
    for _ in range(60):
        tr = db.create_transaction()
        result = work.claim(tr, L, T, time.time() + 1, 1, "h", 3, rng=rng)
        (claimed,) = result.claimed
        seen.add(due.index(claimed.job.id))
        tr.cancel()  # nothing claimed for good: every round sees the same queue
    assert max(seen) < 64
    assert len(seen) > 20  # spread over them, not the first few


def test_a_step_reads_its_due_range_once_though_it_wrote_in_it(db, reads):
    """An attempt that ends as a retry due now puts its job back in the due
    range the same step claims from; the prefetched rows still serve the
    claim's read (the merge asks for more only if the buffered keys used up
    the rows read): the prefetch and the picked jobs' rows, two reads."""
    for n in range(200):  # more than the claim reads, so that its rows are not the whole range
        client.enqueue(db, T, {"n": n})
    _, (first,) = work.step(db, L, [], [], [(T, 2, 3)], time.time(), "h")
    assert len(first.claimed) == 2
    retry = [work.Outcome(c.job, work.OutcomeKind.RETRY, error={"type": "E", "message": "m"}) for c in first.claimed]
    reads.clear()
    _, (second,) = work.step(db, L, retry, [], [(T, 2, 3)], time.time(), "h")
    assert len(second.claimed) == 2
    assert len(reads) == 2
