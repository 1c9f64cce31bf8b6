"""A dispatcher's commit whose answer is lost
(CommitUnknownResult: it committed, the host was not told). A proxy between
the host and the server runs the commit to its end and then drops the
connection without the answer."""

from __future__ import annotations

import time
import uuid

import pytest

import fdblayer
from actors import jobs
from fdblayer.jobs.job import JobState
from tests.workers.pg_faults import CommitCutter, own_pg, per_id, runlog  # noqa: F401
from tests.workers.test_workers_trust import dispatcher_pid

pytestmark = pytest.mark.slow


@pytest.fixture
def cutter(own_pg):  # noqa: F811
    proxy = CommitCutter(own_pg.port)
    prefix = f"p{uuid.uuid4().hex[:12]}"
    direct = own_pg.url(prefix=prefix)
    db = fdblayer.open(direct)
    yield proxy, proxy.url(prefix), db
    proxy.close()
    db.drop()
    db.close()


def _flow_and_cut(proxy, url, db, runlog, hosts, count=40, seconds=0.25):  # noqa: ANN001, F811
    """``count`` jobs of ``seconds`` on 2 workers; three of the dispatcher's commits lose their answers."""
    host = hosts(["q=p2_mod:nap"], store=url, concurrency=2, run_log=runlog.path, extra=["--max-attempts", "5"])
    ids = [f"j{n:04d}" for n in range(count)]
    jobs.add_many(db, "q", {i: {"s": seconds, "n": n} for n, i in enumerate(ids)})
    dpid = dispatcher_pid(host, db)
    t0 = time.time()
    while len(runlog("end")) < 4 and time.time() - t0 < 15:
        time.sleep(0.02)
    for _ in range(3):  # three of the dispatcher's commits lose their answers, a moment apart
        before = proxy.cut_done
        proxy.cut(1, app=f"otpjobs[{dpid}]")
        deadline = time.time() + 5
        while proxy.cut_done == before and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.6)
    return ids, host


def test_jobs_claimed_by_a_commit_whose_answer_was_lost_are_not_stranded(cutter, runlog, hosts):  # noqa: F811
    proxy, url, db = cutter
    jobs.set_type_timeout(db, "q", 12)  # lease and lifeline: 12 s
    ids, host = _flow_and_cut(proxy, url, db, runlog, hosts)
    cut_at = time.time()
    claimed_since: dict = {}
    longest: dict = {}
    while time.time() - cut_at < 10:  # 40 x 0.25 s on 2 workers: about 5 s of work in all
        states = {i: jobs.status(db, "q", i) for i in ids}
        for i, st in states.items():
            if st.state is JobState.CLAIMED:
                claimed_since.setdefault(i, time.time())
                longest[i] = time.time() - claimed_since[i]
            else:
                claimed_since.pop(i, None)
        if all(st.state is JobState.FINISHED for st in states.values()):
            break
        time.sleep(0.25)
    states = {i: jobs.status(db, "q", i) for i in ids}
    unfinished = {
        i: (st.state.name, st.worker, st.attempt) for i, st in states.items() if st.state is not JobState.FINISHED
    }
    stuck = {i: round(s, 1) for i, s in longest.items() if s > 3}
    assert proxy.cut_done == 3
    assert not unfinished and not stuck, (
        f"10 s after 3 lost commit answers, with the host idle: unfinished (state, worker, attempt) {unfinished}; "
        f"claimed for more than 3 s: {stuck}"
    )


@pytest.mark.parametrize(
    "count,seconds",
    [(40, 0.25), (3000, 0.001)],
    ids=["long_runs", "brief_runs"],  # brief: ended before their start was written, outcomes waiting for a step
)
def test_jobs_claimed_by_a_commit_whose_answer_was_lost_are_not_blamed(cutter, runlog, hosts, count, seconds):  # noqa: F811
    proxy, url, db = cutter
    jobs.set_type_timeout(db, "q", 5)  # lease and lifeline: 5 s
    ids, host = _flow_and_cut(proxy, url, db, runlog, hosts, count, seconds)
    assert proxy.cut_done == 3, "three commit answers were lost while jobs flowed"
    results = {}
    for i in ids:
        try:
            results[i] = jobs.result(db, "q", i, timeout=30)
        except Exception as exc:  # noqa: BLE001
            results[i] = repr(exc)
    ends = per_id(runlog("end"))
    wrong = {}
    for n, i in enumerate(ids):
        st = jobs.status(db, "q", i)
        if results[i] != n or st.attempt != 1 or st.errors or ends[i] != 1:
            wrong[i] = (results[i], st.state.name, st.attempt, [e.get("type") for e in st.errors], ends[i])
    assert not wrong, f"(result, state, attempt, errors, runs): {wrong}"
