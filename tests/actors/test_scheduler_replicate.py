"""The built-in ``replicate`` kind between two SQLite files.

In-process runs of the handler (a real JobContext) check the copy rules;
runs through a real node check one-shot and continuous jobs, and a job
SIGKILLed mid-copy that resumes from its checkpoint with no row copied
twice.
"""

from __future__ import annotations

import os
import queue
import signal

import fdb.tuple
import pytest

import fdblayer
from actors.scheduler.replicate import checkpoint_key, read_checkpoint, replicate
from actors.scheduler.core import JobSpec
from actors.handlers import StopSignal
from actors.scheduler.job import scheduler_context

from .test_scheduler_actor import h, wait_until  # noqa: F401 - the node fixture

pytestmark = pytest.mark.timeout(120)


def url(path) -> str:
    return f"sqlite:///{path}"


@fdblayer.transactional
def put_docs(tr, docs: dict) -> None:
    for k, v in docs.items():
        tr.set(fdb.tuple.pack(("docs", k)), v)


@fdblayer.transactional
def dump(tr) -> dict:
    return {bytes(kv.key): bytes(kv.value) for kv in tr.get_range(b"", b"\xfe")}


def fill(path, n: int, start: int = 0) -> dict:
    db = fdblayer.open(url(path))
    docs = {f"d{i:05d}": f"value {i}".encode() for i in range(start, start + n)}
    for i in range(0, n, 500):
        put_docs(db, dict(list(docs.items())[i : i + 500]))
    db.close()
    return docs


def contents(path) -> dict:
    db = fdblayer.open(url(path))
    try:
        return dump(db)
    finally:
        db.close()


def run_inline(spec: dict) -> tuple[list, dict]:
    events: queue.Queue = queue.Queue()
    ctx = scheduler_context(JobSpec.from_dict(spec), None, events, StopSignal())
    replicate(ctx)
    reports: dict = {}
    while not events.empty():
        kind, value = events.get()
        if kind == "report":
            reports.update(value)
    return [], reports


def test_one_shot_copy_is_idempotent_and_propagates_deletes(tmp_path) -> None:
    src, tgt = tmp_path / "src.db", tmp_path / "tgt.db"
    fill(src, 1200)
    spec = {"id": "r", "source": url(src), "target": url(tgt), "options": {"batch_size": 100}}
    _, stats = run_inline(spec)
    assert contents(tgt) == contents(src)
    assert stats["docs_read"] == 1200 and stats["docs_written"] == 1200 and stats["doc_write_failures"] == 0
    assert stats["checkpointed_source_seq"] == 1200
    _, stats = run_inline(spec)  # a second pass writes nothing
    assert stats["docs_written"] == 0 and stats["docs_read"] == 1200
    db = fdblayer.open(url(src))
    fdblayer.transactional(lambda tr: tr.clear(fdb.tuple.pack(("docs", "d00007"))))(db)
    db.close()
    _, stats = run_inline(spec)
    assert stats["docs_written"] == 1 and contents(tgt) == contents(src)
    cp = read_checkpoint(fdblayer.open(url(tgt)), "r")
    assert len(cp["history"]) == 3 and cp["pass"] == 2


def test_one_shot_job_on_a_node_completes_and_leaves_the_table(h, tmp_path) -> None:  # noqa: F811
    src, tgt = tmp_path / "src.db", tmp_path / "tgt.db"
    fill(src, 300)
    h.s.add_job({"id": "rep1", "source": url(src), "target": url(tgt)})
    wait_until(lambda: h.s.jobs() == [], what="one-shot replication done")
    assert contents(tgt) == contents(src)


@pytest.mark.slow
def test_continuous_job_follows_new_writes(h, tmp_path) -> None:  # noqa: F811
    src, tgt = tmp_path / "src.db", tmp_path / "tgt.db"
    fill(src, 100)
    h.s.add_job(
        {"id": "rep2", "source": url(src), "target": url(tgt), "continuous": True, "options": {"poll_interval": 0.05}}
    )
    wait_until(lambda: contents(tgt) == contents(src), what="first pass")
    fill(src, 50, start=100)
    wait_until(lambda: len(contents(tgt)) == 150 and contents(tgt) == contents(src), what="new docs copied")
    info = wait_until(
        lambda: (i := h.s.job("rep2")["info"]) and i.get("docs_written") == 150 and i, what="stats reported"
    )
    assert info["doc_write_failures"] == 0 and info["docs_read"] >= 150
    assert h.s.remove_job("rep2")
    wait_until(lambda: h.live_job_actors() == 0, what="job stopped")


@pytest.mark.slow
def test_sigkilled_replication_resumes_from_its_checkpoint(h, tmp_path) -> None:  # noqa: F811
    src, tgt = tmp_path / "src.db", tmp_path / "tgt.db"
    n = 2000
    fill(src, n)
    # 100 batches at 50 ms or more each: the replication lasts over 5 s, so the
    # kill lands mid-way however slowly this test sees its progress (at 10 ms
    # a batch a loaded machine saw it finish before the kill).
    h.s.add_job(
        {
            "id": "rep3",
            "source": url(src),
            "target": url(tgt),
            "db_name": "_replicator",
            "options": {"batch_size": 20, "batch_delay": 0.05},
        }
    )
    pid = h.job_pid("rep3")
    wait_until(lambda: h.s.job("rep3")["info"].get("checkpointed_source_seq", 0) >= 300, what="some progress")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: h.s.job_summary("rep3")["state"] == "crashing", what="crash seen")
    killed_at = read_checkpoint(fdblayer.open(url(tgt)), "rep3")["seq"]
    assert 0 < killed_at < n
    h.advance(30)  # one crash: 30 s of backoff on the scheduler's clock
    h.s.reschedule()
    wait_until(lambda: h.s.jobs() == [], timeout=60, what="resumed replication completed")
    cp = read_checkpoint(fdblayer.open(url(tgt)), "rep3")
    sessions = list(reversed(cp["history"]))
    assert len(sessions) == 2
    assert sessions[1]["start_seq"] == sessions[0]["end_seq"] == killed_at  # resumed, not restarted
    assert sum(s["docs_written"] for s in sessions) == n  # no row copied twice
    assert cp["docs_written"] == n and cp["seq"] == n
    assert contents(tgt) == contents(src)
    assert checkpoint_key("rep3") not in contents(tgt)


def test_a_sqlite_file_replicates_into_a_postgres_store_and_back(tmp_path, pg_url) -> None:
    """The replicate kind between backends: SQLite -> PostgreSQL, then the
    PostgreSQL store -> a new SQLite file; all three hold the same rows."""
    src, back = tmp_path / "src.db", tmp_path / "back.db"
    fill(src, 700)
    _, stats = run_inline({"id": "to-pg", "source": url(src), "target": pg_url, "options": {"batch_size": 128}})
    assert stats["docs_written"] == 700 and stats["doc_write_failures"] == 0
    pg = fdblayer.open(pg_url)
    try:
        copied = {k: v for k, v in dump(pg).items() if k.startswith(fdb.tuple.pack(("docs",))[:-1])}
    finally:
        pg.close()
    assert copied == {k: v for k, v in contents(src).items() if k.startswith(fdb.tuple.pack(("docs",))[:-1])}
    _, stats = run_inline({"id": "from-pg", "source": pg_url, "target": url(back)})
    assert stats["docs_written"] == 700
    assert {k: v for k, v in contents(back).items() if k in copied} == copied
