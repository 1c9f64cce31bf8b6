"""A handler steers its job (Retry, Snooze, Cancel), declares its defaults
(the ``handler`` decorator) and is held to a time limit. Real hosts, real
worker processes, a ledger of runs written by the handlers."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from actors import jobs
from fdblayer.jobs import counts
from fdblayer.jobs.keys import DEFAULT_LAYOUT

CONTROL = """
import json, os, time
from actors import jobs

def _log(ctx, event):
    with open(os.environ["CONTROL_LOG"], "a") as f:
        f.write(json.dumps({"id": ctx.id, "event": event, "attempt": ctx.attempt, "t": time.time()}) + "\\n")

def retry_later(ctx):
    _log(ctx, "start")
    if ctx.attempt == 1:
        raise jobs.Retry(in_seconds=2)
    return ctx.attempt

def snooze_once(ctx):
    _log(ctx, "start")
    flag = os.path.join(os.path.dirname(os.environ["CONTROL_LOG"]), "snoozed-" + ctx.id)
    if not os.path.exists(flag):
        open(flag, "w").close()
        raise jobs.Snooze(1)
    return ctx.attempt

def cancel(ctx):
    _log(ctx, "start")
    raise jobs.Cancel("the order was withdrawn")

@jobs.handler(max_attempts=2, backoff=(0.1, 0.1))
def declared(ctx):
    _log(ctx, "start")
    raise ValueError("always")

def stubborn(ctx):
    _log(ctx, "start")
    time.sleep(60)  # ignores ctx.stopping
    return "late"

def polite(ctx):
    _log(ctx, "start")
    if ctx.wait_stopping(60):
        raise RuntimeError("stopped")
    return "late"
"""


@pytest.fixture
def ledger(workdir, monkeypatch):
    (workdir / "control_mod.py").write_text(textwrap.dedent(CONTROL))
    path = workdir / "control.log"
    monkeypatch.setenv("CONTROL_LOG", str(path))

    def starts(job_id: str) -> list:
        if not path.exists():
            return []
        return [r for r in map(json.loads, path.read_text().splitlines()) if r["id"] == job_id]

    return starts


def _failed(db, job_type: str, job_id: str, timeout: float = 30) -> jobs.JobFailed:
    with pytest.raises(jobs.JobFailed) as info:
        jobs.result(db, job_type, job_id, timeout=timeout)
    return info.value


@pytest.mark.slow
def test_retry_runs_again_after_the_delay_the_handler_asked_for(hosts, db, ledger):
    hosts(["r=control_mod:retry_later"], extra=["--max-attempts", "3"])
    job_id = jobs.enqueue(db, "r", {})
    assert jobs.result(db, "r", job_id, timeout=30) == 2
    first, second = ledger(job_id)
    assert 1.0 <= second["t"] - first["t"] < 6, "the asked delay (2 s, whole seconds), not the 1 s backoff"
    assert [e["type"] for e in jobs.status(db, "r", job_id).errors] == ["Retry"]


@pytest.mark.slow
def test_snooze_runs_again_later_without_counting_the_attempt(hosts, db, ledger):
    hosts(["s=control_mod:snooze_once"], extra=["--max-attempts", "1"])
    job_id = jobs.enqueue(db, "s", {})
    assert jobs.result(db, "s", job_id, timeout=30) == 1, "the snoozed run was not an attempt"
    first, second = ledger(job_id)
    assert second["t"] - first["t"] >= 0.5
    st = jobs.status(db, "s", job_id)
    assert st.attempt == 1 and st.errors == () and st.outcome == "succeeded"
    assert counts.read_events(db, DEFAULT_LAYOUT, "s")["snoozed"] == 1


@pytest.mark.slow
def test_cancel_fails_the_job_at_once_whatever_attempts_are_left(hosts, db, ledger):
    hosts(["c=control_mod:cancel"], extra=["--max-attempts", "5"])
    job_id = jobs.enqueue(db, "c", {})
    failed = _failed(db, "c", job_id)
    assert (failed.error_type, failed.error_message, failed.attempts) == ("Cancel", "the order was withdrawn", 1)
    assert len(ledger(job_id)) == 1


@pytest.mark.slow
def test_a_declared_default_holds_under_the_hosts_and_a_job_overrides_it(hosts, db, ledger):
    hosts(["d=control_mod:declared"], extra=["--max-attempts", "5"])
    by_default = jobs.enqueue(db, "d", {})
    own = jobs.enqueue(db, "d", {}, max_attempts=3)
    assert _failed(db, "d", by_default).attempts == 2 and len(ledger(by_default)) == 2
    assert _failed(db, "d", own).attempts == 3 and len(ledger(own)) == 3


@pytest.mark.slow
def test_a_handler_that_ignores_its_time_limit_is_stopped_and_retried(hosts, db, ledger):
    host = hosts(["slow=control_mod:stubborn"], extra=["--max-attempts", "2", "--grace", "1"])
    started = time.time()
    job_id = jobs.enqueue(db, "slow", {}, timeout=1)
    failed = _failed(db, "slow", job_id, timeout=45)
    assert failed.error_type == "JobTimeout" and failed.attempts == 2 and len(ledger(job_id)) == 2
    assert time.time() - started < 30, "each run stopped about 2 s in (limit + grace), not after 60 s"
    assert [e["type"] for e in jobs.status(db, "slow", job_id).errors] == ["JobTimeout", "JobTimeout"]
    assert "job_timed_out" in host.log() and "job_killed" in host.log()
    quick = jobs.enqueue(db, "slow", {}, timeout=1)  # the pool still has its workers
    assert _failed(db, "slow", quick, timeout=45).error_type == "JobTimeout"


@pytest.mark.slow
def test_a_handler_past_the_hosts_job_timeout_sees_stopping(hosts, db, ledger):
    hosts(["p=control_mod:polite"], extra=["--max-attempts", "1", "--job-timeout", "1", "--grace", "10"])
    started = time.time()
    job_id = jobs.enqueue(db, "p", {})
    failed = _failed(db, "p", job_id)
    assert failed.error_type == "JobTimeout" and "stopped" in failed.error_message
    assert time.time() - started < 8, "it stopped when told, well before the grace"


def test_bad_handler_options_and_time_limits_are_refused(db):
    from fdblayer.jobs.exceptions import InvalidArgument

    for bad in (
        {"max_attempts": 0},
        {"max_attempts": True},
        {"timeout": 0},
        {"timeout": -1},
        {"backoff": (1,)},
        {"backoff": ("a", 1)},
        {"priority": 10},
        {"priority": -1},
        {"priority": True},
    ):
        with pytest.raises(InvalidArgument):
            jobs.handler(**bad)
    for bad in (0, -1, float("nan"), "5", 10**9):
        with pytest.raises(InvalidArgument):
            jobs.enqueue(db, "t", {}, timeout=bad)
    for bad in (lambda: jobs.Retry(in_seconds=-1), lambda: jobs.Snooze(float("inf")), lambda: jobs.Snooze("1")):
        with pytest.raises(InvalidArgument):
            bad()


@pytest.mark.slow
def test_a_declared_priority_reaches_producers_through_the_store(hosts, db, workdir):
    (workdir / "prio_mod.py").write_text(
        textwrap.dedent("""
        from actors import jobs

        @jobs.handler(priority=4)
        def run(ctx):
            return ctx.id
    """)
    )
    hosts(["pri=prio_mod:run"])
    from fdblayer.jobs import overview

    by_default = jobs.enqueue(db, "pri", {}, delay=3600)
    own = jobs.enqueue(db, "pri", {}, delay=3600, priority=0)
    assert overview.job_view(db, DEFAULT_LAYOUT, "pri", by_default)["priority"] == 4, "the declared default"
    assert overview.job_view(db, DEFAULT_LAYOUT, "pri", own)["priority"] == 0, "a job's own wins"
    assert jobs.result(db, "pri", jobs.enqueue(db, "pri", {}), timeout=30)
