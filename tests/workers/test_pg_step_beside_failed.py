"""A step built beside a step in flight that then fails (PostgreSQL's
overlapped steps, ``actors.workers.stepping``): the later step passed over
the pending jobs the failed one had taken, and must not leave them for the
lifeline (a type timeout): they are claimed by the next step.

Noticed in session 30, reproduced in session 31: the jobs the failed step
had taken waited for the lifeline (a type timeout), 7 runs of 7."""

from __future__ import annotations

import time

import psycopg
import pytest

from actors import jobs
from fdblayer.jobs.job import JobState
from tests.workers.pg_faults import own_pg, pdb, per_id, pg_store, runlog  # noqa: F401

pytestmark = pytest.mark.slow

N = 120
TYPE_TIMEOUT = 60


def _poison_a_big_claim(store_url: str, conninfo: str, rows: int) -> None:
    """The first commit that updates ``rows`` rows or more at once (a step
    claiming that many jobs) sleeps 0.3 s on the server (so the dispatcher
    builds its next step beside it), then fails as a full disk does (not
    retried); later ones pass."""
    prefix = store_url.rsplit("prefix=", 1)[1].split("&")[0]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SEQUENCE "{prefix}_poison"')
        conn.execute(
            f"""CREATE FUNCTION "{prefix}_poison"() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF (SELECT count(*) FROM changed) >= {rows} AND nextval('"{prefix}_poison"') = 1 THEN
                PERFORM pg_sleep(0.3);
                RAISE EXCEPTION 'poisoned claim' USING ERRCODE = '53100';
              END IF;
              RETURN NULL;
            END $$"""
        )
        conn.execute(
            f'CREATE TRIGGER "{prefix}_poison" AFTER UPDATE ON "{prefix}_kv" '
            f'REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION "{prefix}_poison"()'
        )


def test_jobs_a_failed_step_took_are_claimed_by_the_next_step(own_pg, pg_store, pdb, runlog, hosts):  # noqa: F811
    jobs.set_type_timeout(pdb, "q", TYPE_TIMEOUT)
    ids = [f"j{n:04d}" for n in range(N)]
    for n, i in enumerate(ids):
        jobs.enqueue(pdb, "q", {"s": 0, "n": n}, id=i)
    _poison_a_big_claim(pg_store, own_pg.conninfo(), N // 2)
    started = time.monotonic()
    host = hosts(["q=p2_mod:nap"], store=pg_store, concurrency=4, run_log=runlog.path)
    deadline = time.monotonic() + 20
    left = ids
    while left and time.monotonic() < deadline:
        left = [i for i in left if jobs.status(pdb, "q", i).state is not JobState.FINISHED]
        time.sleep(0.2)
    took = time.monotonic() - started
    assert "step_failed" in host.log(), "the poisoned step did not fail: the test tested nothing"
    assert not left, f"{len(left)} jobs still not done after {took:.1f}s: {left[:5]}"
    ends = per_id(runlog("end"))
    assert set(ends) == set(ids) and max(ends.values()) == 1, "each job ran once"
