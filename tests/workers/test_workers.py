"""Worker hosts run as users run them: real processes, real handler modules, real SIGKILLs."""

from __future__ import annotations

import datetime
import json
import os
import signal
import time

import msgpack
import pytest

import fdblayer
from actors import jobs
from actors.workers.runs import retry_delay
from actors.workers.ticks import SCHEDULE_CHECK
from fdblayer.jobs.job import JobState
from tests.workers.hosts import wait_for


def runs(run_log):
    """The handler runs recorded in the run log, as dicts."""
    if not run_log.exists():
        return []
    return [json.loads(line) for line in run_log.read_text().splitlines() if line.strip()]


def test_a_job_runs_and_its_result_and_progress_are_kept(hosts, db, workdir):
    hosts(["sum=handlers_mod:add"])
    job_id = jobs.enqueue(db, "sum", {"a": 2, "b": 40})
    assert jobs.result(db, "sum", job_id, timeout=20) == 42
    st = jobs.status(db, "sum", job_id)
    assert st.state is JobState.FINISHED and st.outcome == "succeeded"
    assert st.data == {"a": 2, "b": 40}, "the input data is never replaced"
    assert st.progress == {"half": True} and st.attempt == 1


def test_result_without_a_timeout_waits_on_the_store_not_in_a_loop(hosts, db):
    """``result`` with no timeout blocks on the job's watch until the job is
    done: it neither returns early nor reads the store again and again (it
    did: 100% of a CPU while a job ran)."""
    hosts(["sleepy=handlers_mod:sleepy"])
    job_id = jobs.enqueue(db, "sleepy", {"s": 1.5})
    wait_for(lambda: jobs.status(db, "sleepy", job_id).state is JobState.RUNNING, 20, "the job to start")
    cpu, wall = time.process_time(), time.monotonic()
    assert jobs.result(db, "sleepy", job_id) == "slept"
    waited, used = time.monotonic() - wall, time.process_time() - cpu
    assert waited > 0.5, "it waited for the job"
    assert used < 0.25 * waited, f"{used:.2f} s of CPU over a {waited:.2f} s wait"


def test_many_jobs_each_finish_once_with_their_result(hosts, db, workdir):
    run_log = workdir / "runs.jsonl"
    hosts(["sum=handlers_mod:add"], concurrency=4, run_log=run_log)
    ids = [jobs.enqueue(db, "sum", {"a": n, "b": 1}) for n in range(300)]
    assert [jobs.result(db, "sum", i, timeout=60) for i in ids] == [n + 1 for n in range(300)]
    ends = [r["id"] for r in runs(run_log) if r["event"] == "end"]
    assert sorted(ends) == sorted(ids)


@pytest.mark.slow
def test_a_failing_job_is_retried_then_fails_for_good(hosts, db):
    hosts(["flaky=handlers_mod:fail_until"], extra=["--max-attempts", "2"])
    started = time.time()
    job_id = jobs.enqueue(db, "flaky", {})
    with pytest.raises(jobs.JobFailed) as info:
        jobs.result(db, "flaky", job_id, timeout=30)
    failed = info.value
    assert failed.attempts == 2 and failed.error_type == "ValueError"
    assert "failed attempt 2" in failed.error_message and "fail_until" in failed.traceback
    # The first retry waits base (1 s) times a jitter in [0.5, 1), rounded up
    # to a whole second: never less than half a second.
    assert time.time() - started >= 0.5, "the retry waited its backoff"
    st = jobs.status(db, "flaky", job_id)
    assert st.outcome == "failed"
    assert [(e["attempt"], e["type"], e["message"]) for e in st.errors] == [
        (1, "ValueError", "failed attempt 1"),
        (2, "ValueError", "failed attempt 2"),
    ], "every attempt's error, in order"
    assert "fail_until" in st.errors[0]["traceback"] and st.errors[0]["at"] <= st.errors[1]["at"]


@pytest.mark.slow
def test_a_retry_can_succeed_and_max_attempts_is_per_job(hosts, db):
    hosts(["flaky=handlers_mod:fail_until"], extra=["--max-attempts", "1"])
    job_id = jobs.enqueue(db, "flaky", {"ok_at": 2}, max_attempts=2)
    assert jobs.result(db, "flaky", job_id, timeout=30) == {"attempt": 2}


def test_prefetch_follows_the_run_time():
    from actors.workers.runs import MAX_PREFETCH, prefetch_for

    assert prefetch_for(0.00001) == MAX_PREFETCH, "quick jobs go in batches"
    assert prefetch_for(0.01) == 10, "about 0.1 s of work"
    assert prefetch_for(0.2) == 2, "one runs, the next waits in the worker"
    assert prefetch_for(0.5) == prefetch_for(3600) == 1, "a long job never waits behind another"


@pytest.mark.parametrize("long_jobs", [1, 3])
def test_a_job_claimed_while_the_pool_starts_goes_to_the_next_worker_up(hosts, db, long_jobs):
    """Jobs due when a host starts are claimed as soon as its first worker is
    up; one that no worker up has room for (each runs a long job) goes to
    the next worker that comes up, not to the first that ends its long job."""

    @fdblayer.transactional
    def add(tr):  # one claim, in id order: the long ones first
        for n in range(long_jobs):
            jobs.enqueue(tr, "nap", {"s": 30}, id=f"a-long-{n}")
        jobs.enqueue(tr, "nap", {"s": 0}, id="b-quick")

    add(db)
    hosts(["nap=handlers_mod:sleepy"], concurrency=long_jobs + 1, wait=False)
    assert jobs.result(db, "nap", "b-quick", timeout=10) == "slept"
    assert all(jobs.get_job_state(db, "nap", f"a-long-{n}") is JobState.RUNNING for n in range(long_jobs))


@pytest.mark.slow
def test_a_quick_result_is_kept_at_once_though_a_long_job_runs_next_in_its_worker(hosts, db):
    """A worker reports ended runs in batches; one queued behind a long run
    is still reported within REPORT_DELAY (a timer), not when that run ends."""

    hosts(["nap=handlers_mod:sleepy"], concurrency=1)
    for _ in range(3):  # measured quick: the worker is then handed several jobs at once
        jobs.result(db, "nap", jobs.enqueue(db, "nap", {"s": 0}), timeout=20)

    @fdblayer.transactional
    def three(tr):  # one claim, in id order: quick, long, quick
        for job_id, seconds in (("a", 0), ("b", 4), ("c", 0)):
            jobs.enqueue(tr, "nap", {"s": seconds}, id=job_id)

    three(db)
    asked = time.monotonic()
    assert jobs.result(db, "nap", "a", timeout=10) == "slept"
    assert time.monotonic() - asked < 2.0, "a's result waited for b's end"
    assert jobs.get_job_state(db, "nap", "b") is JobState.RUNNING
    assert jobs.result(db, "nap", "c", timeout=20) == "slept"


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    import random

    rng = random.Random(7)
    delays = [retry_delay(n, 1.0, 10.0, rng) for n in range(1, 8)]
    for n, d in enumerate(delays, start=1):
        full = min(10.0, 2 ** (n - 1))
        assert full / 2 <= d < full
    assert max(delays) < 10.0


def test_an_unencodable_result_fails_the_attempt(hosts, db):
    hosts(["bad=handlers_mod:bad_result"], extra=["--max-attempts", "1"])
    job_id = jobs.enqueue(db, "bad", {})
    with pytest.raises(jobs.JobFailed) as info:
        jobs.result(db, "bad", job_id, timeout=20)
    assert info.value.error_type == "UnstorableResult"
    assert "result['not json']" in info.value.error_message and "job data" not in info.value.error_message


@pytest.mark.parametrize(
    "value, says",
    [
        ({1, 2}, "set at result is not a JSON-compatible value"),
        ({"when": datetime.datetime(2024, 1, 1)}, "datetime at result['when'] is not a JSON-compatible value"),
        ({"rows": [1, object()]}, "object at result['rows'][1] is not"),
        ({1: "x"}, "key 1 at result is a int"),
        ("x" * 70_000, "it encodes to 70,005 bytes; results are limited to 64,000 bytes"),
        ("x" * 200_000, "it encodes to 200,005 bytes; results are limited to 64,000 bytes"),
    ],
)
def test_an_unstorable_result_is_named_as_the_result_with_the_limit_and_is_final(value, says):
    from actors.workers.context import RESULT_LIMIT, UnstorableResult, describe_error, encode_result
    from fdblayer.jobs.exceptions import EncodingError

    with pytest.raises(UnstorableResult) as info:
        encode_result(value)
    message = str(info.value)
    assert message.startswith("the handler's result is not storable: ") and says in message, message
    assert f"{RESULT_LIMIT:,} bytes" in message and "job data" not in message and "data[" not in message
    assert isinstance(info.value, EncodingError), "callers catching EncodingError still catch it"
    error = describe_error(info.value)
    assert error["type"] == "UnstorableResult" and error["message"] == message and error["final"] is True
    assert "final" not in describe_error(ValueError("a handler's own error")), "only an unstorable result is final"
    assert "final" not in describe_error(EncodingError("ctx.progress() too large")), "nor other encoding errors"


def test_the_result_limit_counts_the_result_not_its_wrapper():
    """README: results of at most 64,000 bytes encoded: a result whose own
    encoding is 64,000 bytes is kept (the stored form's 8 more bytes are
    not the handler's), one more byte is refused."""
    from actors.workers.context import RESULT_LIMIT, UnstorableResult, decode_result, encode_result

    at_limit = "x" * (RESULT_LIMIT - 3)  # a str16 header: 3 bytes
    assert len(msgpack.packb(at_limit)) == RESULT_LIMIT
    assert decode_result(encode_result(at_limit)) == at_limit
    with pytest.raises(UnstorableResult, match="encodes to 64,001 bytes"):
        encode_result(at_limit + "x")


@pytest.mark.parametrize("size", [8_100, 200_000, 10_000_000])
def test_progress_past_its_limit_is_told_as_progress_with_its_limit(size):
    """Past the store's own value limit too: the error names progress and
    its 8,000 bytes, not job data and the store's limit; nothing is written
    (the store is never opened)."""
    from actors.workers.context import PROGRESS_LIMIT, _write_progress
    from fdblayer.jobs.exceptions import EncodingError

    def no_store():
        raise AssertionError("nothing is written")

    with pytest.raises(EncodingError) as info:
        _write_progress(no_store, None, {"p": "x" * size})
    message = str(info.value)
    assert message.startswith("progress encodes to ") and message.endswith(f"at most {PROGRESS_LIMIT}"), message
    assert "job data" not in message


#: A handler that records each run (its side effect) and returns what cannot be stored.
UNSTORABLE = """
import datetime, json, os

def unstorable(ctx):
    with open(os.environ["RUN_LOG"], "a") as f:
        f.write(json.dumps({"id": ctx.id, "event": "start", "attempt": ctx.attempt}) + "\\n")
    kind = ctx.data["kind"]
    if kind == "set":
        return {"tags": {"a", "b"}}
    if kind == "datetime":
        return datetime.datetime.now()
    return "x" * 70_000
"""


# Both sides of issue 27, item 7: the worker marks the error "final"
# (describe_error), the dispatcher then ends the job without a retry (before,
# it ran max_attempts, 3, times).
@pytest.mark.slow
def test_an_unstorable_result_fails_the_job_at_once_and_runs_exactly_once(hosts, db, workdir):
    (workdir / "unstorable_mod.py").write_text(UNSTORABLE)
    run_log = workdir / "runs.jsonl"
    hosts(["unstorable=unstorable_mod:unstorable"], run_log=run_log)  # the default max attempts: 3
    ids = {kind: jobs.enqueue(db, "unstorable", {"kind": kind}) for kind in ("set", "datetime", "big")}
    for kind, job_id in ids.items():
        with pytest.raises(jobs.JobFailed) as info:
            jobs.result(db, "unstorable", job_id, timeout=30)
        failed = info.value
        assert failed.error_type == "UnstorableResult" and failed.attempts == 1, (kind, failed)
        assert "the handler's result is not storable" in failed.error_message and "64,000 bytes" in failed.error_message
        assert jobs.status(db, "unstorable", job_id).outcome == "failed"
    time.sleep(1.5)  # a retry would be due by now (the first backoff is 0.5-1 s)
    started = sorted(r["id"] for r in runs(run_log))
    assert started == sorted(ids.values()), "each handler ran exactly once: its side effects were not repeated"


@pytest.mark.slow
def test_a_delayed_job_never_starts_early(hosts, db, workdir):
    run_log = workdir / "runs.jsonl"
    hosts(["sum=handlers_mod:add"], run_log=run_log)
    asked = time.time()
    job_id = jobs.enqueue(db, "sum", {"a": 1, "b": 1}, delay=1.2)
    assert jobs.get_job_state(db, "sum", job_id) is JobState.PENDING
    assert jobs.result(db, "sum", job_id, timeout=20) == 2
    (start,) = [r for r in runs(run_log) if r["event"] == "start"]
    assert start["t"] >= asked + 1.2
    assert start["t"] - jobs.get_job(db, "sum", job_id).scheduled_time < 1.0, "it started soon after it was due"


@pytest.mark.slow
def test_a_job_at_a_time_waits_for_it(hosts, db, workdir):
    run_log = workdir / "runs.jsonl"
    hosts(["sum=handlers_mod:add"], run_log=run_log)
    due = time.time() + 1.5
    job_id = jobs.enqueue(db, "sum", {"a": 1, "b": 1}, at=due)
    assert jobs.result(db, "sum", job_id, timeout=20) == 2
    assert runs(run_log)[0]["t"] >= due


def test_a_worker_killed_mid_job_is_restarted_and_the_job_runs_again_at_once(hosts, db, workdir, store_url):
    jobs.set_type_timeout(db, "dies", 60)  # far longer than the test may wait: no activity-monitor help
    host = hosts(["dies=handlers_mod:die_first"])
    before = set(host.worker_pids())
    started = time.time()
    job_id = jobs.enqueue(db, "dies", {})
    assert jobs.result(db, "dies", job_id, timeout=20) == 2
    assert time.time() - started < 10, "re-enqueued at once, not after the type timeout"
    assert "worker_died" in host.log()
    wait_for(lambda: len(host.worker_pids()) == 2 and set(host.worker_pids()) != before, 10, "a restarted worker")


@pytest.mark.slow
def test_sigkill_of_a_busy_worker_from_outside(hosts, db, workdir):
    jobs.set_type_timeout(db, "pid", 60)
    host = hosts(["pid=handlers_mod:pid"])
    pidfile = workdir / "pid.txt"
    job_id = jobs.enqueue(db, "pid", {"pidfile": str(pidfile), "s": 3})
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), 20, "the handler to start")
    victim = int(pidfile.read_text())
    assert victim in host.worker_pids()
    pidfile.unlink()
    os.kill(victim, signal.SIGKILL)
    result = jobs.result(db, "pid", job_id, timeout=30)
    assert result != victim and jobs.status(db, "pid", job_id).attempt == 2


@pytest.mark.slow
def test_every_job_finishes_exactly_once_across_worker_kills(hosts, db, workdir):
    """A SIGKILL may make a job run again (at least once), never twice in
    workers that live on: of each job's runs, every one but the last was in
    a killed worker, and the last ran to its end and is the attempt kept."""
    jobs.set_type_timeout(db, "sum", 60)
    run_log = workdir / "runs.jsonl"
    host = hosts(["sum=handlers_mod:add"], concurrency=4, run_log=run_log, extra=["--max-attempts", "10"])
    ids = [jobs.enqueue(db, "sum", {"a": n, "b": 0}) for n in range(400)]
    killed: set[int] = set()
    deadline = time.time() + 60
    while time.time() < deadline and len(killed) < 6:
        pids = host.worker_pids()
        if pids:
            victim = pids[len(killed) % len(pids)]
            os.kill(victim, signal.SIGKILL)
            killed.add(victim)
        time.sleep(0.15)
    assert [jobs.result(db, "sum", i, timeout=60) for i in ids] == list(range(400))
    by_job: dict[str, list[dict]] = {}
    for r in runs(run_log):
        by_job.setdefault(r["id"], []).append(r)
    assert sorted(by_job) == sorted(ids), "every job ran, and only these"
    for job_id in ids:
        starts = sorted((r for r in by_job[job_id] if r["event"] == "start"), key=lambda r: r["t"])
        ends = [r for r in by_job[job_id] if r["event"] == "end"]
        *cut_short, last = starts
        assert all(r["pid"] in killed for r in cut_short), f"{job_id} ran again though no kill cut it short: {starts}"
        assert any(e["pid"] == last["pid"] and e["attempt"] == last["attempt"] for e in ends), (
            f"{job_id}: its last run did not reach its end: {by_job[job_id]}"
        )
        st = jobs.status(db, "sum", job_id)
        assert st.outcome == "succeeded" and st.attempt == last["attempt"], (job_id, st.attempt, starts)


@pytest.mark.slow
def test_a_job_removed_while_running_sees_stopping_and_its_outcome_is_discarded(hosts, db, workdir):
    jobs.set_type_timeout(db, "long", 2)  # leases renew every 0.5 s
    run_log = workdir / "runs.jsonl"
    host = hosts(["long=handlers_mod:until_stopped"], run_log=run_log)
    job_id = jobs.enqueue(db, "long", {})
    wait_for(lambda: any(r["event"] == "start" for r in runs(run_log)), 20, "the handler to start")
    jobs.remove(db, "long", job_id)
    wait_for(lambda: any(r["event"] == "stopping" for r in runs(run_log)), 10, "ctx.stopping")
    wait_for(lambda: "job_outcome_discarded" in host.log() or "job_lost" in host.log(), 10, "the discard")
    with pytest.raises(jobs.NotFound):
        jobs.get_job(db, "long", job_id)


@pytest.mark.slow
def test_a_long_handler_keeps_its_lease(hosts, db, workdir):
    jobs.set_type_timeout(db, "sleepy", 1)  # the activity monitor would take it after 1 s of silence
    run_log = workdir / "runs.jsonl"
    hosts(["sleepy=handlers_mod:sleepy"], run_log=run_log)
    job_id = jobs.enqueue(db, "sleepy", {"s": 3.0})
    assert jobs.result(db, "sleepy", job_id, timeout=30) == "slept"
    assert [r["event"] for r in runs(run_log)] == ["start", "end"], "it ran once"


def test_sigterm_lets_running_handlers_finish_and_releases_claimed_jobs(hosts, db, workdir):
    run_log = workdir / "runs.jsonl"
    host = hosts(["sleepy=handlers_mod:sleepy"], concurrency=1, run_log=run_log, extra=["--grace", "10"])
    first = jobs.enqueue(db, "sleepy", {"s": 1.5})
    wait_for(lambda: runs(run_log), 20, "the first handler to start")
    second = jobs.enqueue(db, "sleepy", {"s": 1.5})
    wait_for(lambda: jobs.get_job_state(db, "sleepy", second) is JobState.RUNNING, 10, "the second to be claimed")
    assert host.terminate() == 0
    assert jobs.result(db, "sleepy", first, timeout=1) == "stopped", "it finished within the grace, told to stop"
    st = jobs.status(db, "sleepy", second)
    assert st.state is JobState.PENDING and st.attempt == 0, "claimed, never started: back in the queue, uncounted"
    assert len(runs(run_log)) == 2


@pytest.mark.slow
def test_sigterm_past_the_grace_puts_the_job_back(hosts, db, workdir):
    run_log = workdir / "runs.jsonl"
    host = hosts(["forever=handlers_mod:pid"], concurrency=1, run_log=run_log, extra=["--grace", "0.5"])
    job_id = jobs.enqueue(db, "forever", {"pidfile": str(workdir / "p"), "s": 30})
    wait_for(lambda: runs(run_log), 20, "the handler to start")
    started = time.time()
    assert host.terminate() == 0
    assert time.time() - started < 15
    st = jobs.status(db, "forever", job_id)
    assert st.state is JobState.PENDING and st.attempt == 0


@pytest.mark.slow
def test_two_hosts_share_a_queue_and_never_run_a_job_twice_at_once(hosts, db, workdir):
    run_log = workdir / "runs.jsonl"
    hosts(["sleepy=handlers_mod:sleepy"], concurrency=2, run_log=run_log, name="a")
    hosts(["sleepy=handlers_mod:sleepy"], concurrency=2, run_log=run_log, name="b")
    ids = [jobs.enqueue(db, "sleepy", {"s": 0.05}) for _ in range(60)]
    assert all(jobs.result(db, "sleepy", i, timeout=60) == "slept" for i in ids)
    starts = [r for r in runs(run_log) if r["event"] == "start"]
    assert sorted(r["id"] for r in starts) == sorted(ids), "each job ran once"
    pids = {r["pid"] for r in starts}
    assert len(pids) >= 3, "both hosts' workers took jobs"


def tick_of(job_id: str) -> int:
    """The tick (seconds since the epoch) of a periodic job's id, ``tick-<epoch>``."""
    prefix, _, stamp = job_id.partition("-")
    assert prefix == "tick" and stamp.isdigit(), job_id
    return int(stamp)


def watch_ticks_past_a_schedule_reread(run_log, since: float) -> None:
    """Wait until a tick later than ``since`` plus a re-read of the schedules
    (SCHEDULE_CHECK) ran: a tick replayed by that re-read has run by then."""
    until = since + SCHEDULE_CHECK + 2
    wait_for(
        lambda: any(tick_of(r["id"]) >= until for r in runs(run_log)), SCHEDULE_CHECK + 60, f"a tick past {until:.0f}"
    )


def check_tick_jobs(db, run_log) -> list[int]:
    """What holds for any schedule once its hosts stopped: the type's jobs are
    the ticks up to the schedule's last one, each run at most once, none run
    before its tick. Returns the ticks in the store, in order."""
    stamps = sorted(tick_of(info.id) for info in jobs.get_jobs(db, "tick"))
    [entry] = jobs.schedules(db)
    assert stamps and stamps[-1] == entry["last_tick"], (stamps[-5:], entry)
    ran = [r for r in runs(run_log) if r["event"] == "start"]
    ids = [r["id"] for r in ran]
    assert len(ids) == len(set(ids)), f"a tick ran twice: {sorted(i for i in ids if ids.count(i) > 1)}"
    assert {tick_of(i) for i in ids} <= set(stamps), "every tick that ran is a job of the schedule"
    early = [r for r in ran if r["t"] < tick_of(r["id"]) - 0.05]
    assert not early, f"ran before their tick: {early}"
    return stamps


@pytest.mark.slow
def test_periodic_ticks_are_enqueued_once_with_two_hosts(hosts, db, workdir):
    """Two hosts serve one schedule: each second after the schedule was set
    is one job, whichever host fires it, and no tick already done is
    enqueued again, at the hosts' start or when they re-read the schedules."""
    jobs.set_type_timeout(db, "tick", 30)
    jobs.schedule(db, "tick", "* * * * * *")
    [entry] = jobs.schedules(db)
    set_at = entry["last_tick"]  # ticks up to here count as done
    run_log = workdir / "runs.jsonl"
    cron = ["--cron", "tick=* * * * * *"]  # the same schedule: it keeps its last tick
    a = hosts(["tick=handlers_mod:tick"], run_log=run_log, extra=cron, name="a")
    b = hosts(["tick=handlers_mod:tick"], run_log=run_log, extra=cron, name="b")
    watch_ticks_past_a_schedule_reread(run_log, time.time())  # both read the schedules once they started
    assert a.terminate() == 0 and b.terminate() == 0
    stamps = check_tick_jobs(db, run_log)
    assert stamps[0] > set_at, f"tick {stamps[0]} was done when the schedule was set ({set_at})"
    assert stamps == list(range(stamps[0], stamps[-1] + 1)), "one job per tick, none skipped"


@pytest.mark.slow
def test_a_schedule_set_while_a_host_runs_takes_effect_at_once(hosts, db, workdir):
    """Found by a review (session 31, 5 of 5): a host read the schedules
    only every SCHEDULE_CHECK (10) seconds, so a schedule set while it ran
    lost its first ticks (only the latest missed one was fired, late). Hosts
    now watch their types' schedules: every tick after the set is one job."""
    jobs.set_type_timeout(db, "tick", 30)
    run_log = workdir / "runs.jsonl"
    host = hosts(["tick=handlers_mod:tick"], run_log=run_log)
    jobs.schedule(db, "tick", "* * * * * *")
    [entry] = jobs.schedules(db)
    set_at = entry["last_tick"]
    wait_for(lambda: any(tick_of(j.id) >= set_at + 4 for j in jobs.get_jobs(db, "tick")), 30, "four ticks")
    assert host.terminate() == 0
    stamps = check_tick_jobs(db, run_log)
    assert stamps[:4] == [set_at + 1, set_at + 2, set_at + 3, set_at + 4], f"ticks lost: {stamps} (set at {set_at})"


@pytest.mark.slow
def test_missed_ticks_are_not_replayed(db, hosts, workdir):
    """Five ticks passed while no host ran: when one starts, only the latest
    of them is enqueued (no tick from before its start), and a re-read of
    the schedules enqueues no tick again."""
    from fdblayer.jobs import schedules
    from fdblayer.jobs.codec import encode_data
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    jobs.set_type_timeout(db, "tick", 30)
    schedules.set_schedule(db, DEFAULT_LAYOUT, "tick", "* * * * * *", encode_data({}), int(time.time()) - 5)
    run_log = workdir / "runs.jsonl"
    launched = int(time.time())
    host = hosts(["tick=handlers_mod:tick"], run_log=run_log)
    watch_ticks_past_a_schedule_reread(run_log, time.time())
    assert host.terminate() == 0
    stamps = check_tick_jobs(db, run_log)
    assert stamps[0] >= launched, f"ticks from before the host started were replayed: {stamps[:6]} ({launched})"


@pytest.mark.slow
@pytest.mark.parametrize("change", ["rescheduled", "unscheduled"])
def test_no_tick_of_an_old_schedule_once_it_changed(hosts, db, workdir, change):
    """A host armed its next tick of an every-second schedule; the schedule
    is then changed (to once a day) or removed: no tick of the old one is
    enqueued after that, though the host reads the schedules again only
    every SCHEDULE_CHECK seconds."""
    jobs.set_type_timeout(db, "tick", 30)
    jobs.schedule(db, "tick", "* * * * * *")
    run_log = workdir / "runs.jsonl"
    host = hosts(["tick=handlers_mod:tick"], run_log=run_log)
    wait_for(lambda: run_log.exists() and len(run_log.read_text().splitlines()) >= 2, 30, "two ticks to run")
    if change == "rescheduled":
        jobs.schedule(db, "tick", "59 23 * * * 59")
    else:
        jobs.unschedule(db, "tick")
    changed = time.time()
    time.sleep(4.0)
    assert host.terminate() == 0
    late = sorted(
        int(j.id.split("-")[1]) - changed for j in jobs.get_jobs(db, "tick") if int(j.id.split("-")[1]) > changed
    )
    assert not late, f"ticks of the old schedule enqueued after it {change}: +{late} s"


@pytest.mark.slow
def test_a_host_started_with_the_schedule_it_serves_keeps_the_schedules_data(hosts, db, workdir):
    """``jobs.schedule`` gave the ticks their data; a host started with
    ``--cron`` for the same type (no data of its own) keeps it."""
    jobs.set_type_timeout(db, "tick", 30)
    jobs.schedule(db, "tick", "* * * * * *", {"report": "daily"})
    run_log = workdir / "runs.jsonl"
    host = hosts(["tick=handlers_mod:tick"], run_log=run_log, extra=["--cron", "tick=* * * * * *"])
    wait_for(lambda: run_log.exists() and run_log.read_text().strip(), 30, "a tick to run")
    assert host.terminate() == 0
    assert [s["data"] for s in jobs.schedules(db)] == [{"report": "daily"}]
    assert {jobs.status(db, "tick", j.id).data["report"] for j in jobs.get_jobs(db, "tick")} == {"daily"}


def test_a_schedule_declares_a_new_type_as_an_enqueue_does(db):
    """README: ``jobs.schedule`` is the alternative to ``--cron``, and a new
    type gets the default timeout from a script: a type no host served yet
    is declared with it (it raised NoTypeTimeout); a timeout set is kept."""
    from actors.workers.client import DEFAULT_TYPE_TIMEOUT
    from fdblayer.jobs import activity
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    jobs.schedule(db, "brandnew", "*/5 * * * *", {"report": "weekly"})
    assert activity.get_type_timeout(db, DEFAULT_LAYOUT, "brandnew") == DEFAULT_TYPE_TIMEOUT
    assert [(s["type"], s["cron"], s["data"]) for s in jobs.schedules(db)] == [
        ("brandnew", "*/5 * * * *", {"report": "weekly"})
    ]
    jobs.set_type_timeout(db, "kept", 7)
    jobs.schedule(db, "kept", "* * * * *")
    assert activity.get_type_timeout(db, DEFAULT_LAYOUT, "kept") == 7


def test_a_missing_handler_is_a_one_line_error(hosts, workdir):
    host = hosts(["x=no_such_module:fn"], wait=False)
    assert host.proc.wait(30) == 2
    lines = host.log().strip().splitlines()
    assert lines == [
        f"otpjobs: error: handler 'no_such_module:fn': no module named 'no_such_module' (on sys.path or in {workdir})"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "item, says",
    [
        ("x=handlers_mod:nope", "has no attribute 'nope'"),
        ("x=handlers_mod", "package.module:callable"),
        ("x=handlers_mod:HANDLERS_NOT_CALLABLE", "has no attribute"),
        ("noequals", "TYPE=package.module:callable"),
    ],
)
def test_a_broken_handler_is_a_clear_error(hosts, item, says):
    host = hosts([item], wait=False)
    assert host.proc.wait(30) == 2
    assert says in host.log() and host.log().count("\n") == 1


@pytest.mark.slow
def test_a_node_runs_a_pool_from_its_config(workdir, store_url, db):
    import subprocess
    import sys

    from tests.procs import free_port
    from tests.workers.hosts import ROOT

    port = free_port()
    (workdir / "node.ini").write_text(
        f"[node]\nstore = {store_url}\nport = {port}\nhttp_port = 0\n"
        "[workers]\nsum = handlers_mod:add\n[worker]\nconcurrency = 1\n"
    )
    log = open(workdir / "node.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "actors", "node", "start", "--config", str(workdir / "node.ini")],
        cwd=workdir,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        job_id = jobs.enqueue(db, "sum", {"a": 3, "b": 4}) if jobs.get_type_timeout(db, "sum") else None
        if job_id is None:
            wait_for(lambda: jobs.get_type_timeout(db, "sum"), 30, "the node to declare the type")
            job_id = jobs.enqueue(db, "sum", {"a": 3, "b": 4})
        assert jobs.result(db, "sum", job_id, timeout=30) == 7
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        from supervision.system import stop_node

        if proc.poll() is None:
            proc.kill()
        stop_node(port)
        log.close()


def test_progress_that_would_pass_its_bound_writes_nothing(hosts, db):
    hosts(["big=handlers_mod:big_progress"], extra=["--max-attempts", "1"])
    job_id = jobs.enqueue(db, "big", {})
    assert jobs.result(db, "big", job_id, timeout=20) == "EncodingError"
    assert jobs.status(db, "big", job_id).progress == {"a": "x" * 5000}


@pytest.mark.slow
def test_a_running_host_is_visible_with_the_job_it_runs_and_gone_after_a_clean_stop(hosts, db, workdir):
    from fdblayer.jobs import hosts as beats
    from fdblayer.jobs.keys import DEFAULT_LAYOUT

    run_log = workdir / "runs.jsonl"
    host = hosts(["sleepy=handlers_mod:sleepy"], concurrency=2, run_log=run_log)
    job_id = jobs.enqueue(db, "sleepy", {"s": 30})
    wait_for(lambda: runs(run_log), 20, "the handler to start")

    def running() -> list:
        return [r for h in beats.list_hosts(db, DEFAULT_LAYOUT, time.time()) for r in h.get("running", [])]

    wait_for(lambda: any(r["id"] == job_id for r in running()), 20, "the heartbeat to show the job")
    [entry] = beats.list_hosts(db, DEFAULT_LAYOUT, time.time())
    assert entry["alive"] and entry["concurrency"] == 2 and entry["types"] == ["sleepy"] and entry["busy"] == 1
    assert host.terminate() == 0
    assert beats.list_hosts(db, DEFAULT_LAYOUT, time.time()) == [], "a clean stop clears its beat"
