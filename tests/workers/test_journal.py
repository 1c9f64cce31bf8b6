"""The workers' journal of ended runs (``actors.workers.journal``): what a
successor reads back, what a death mid-write leaves, how far it grows."""

from __future__ import annotations

import os

from actors.workers import journal
from actors.workers.protocol import RunJob
from fdblayer.jobs.job import Job


def _run(n: int) -> RunJob:
    return RunJob(n, Job("t", f"j{n}", f"lock{n}", 5, False), b"", 2, 3, "m:f")


def _dead(pid: int) -> bool:
    return False


def test_a_successor_reads_every_end_back_and_the_files_go(tmp_path):
    writer = journal.JournalWriter(str(tmp_path), "k1")
    writer.ended(_run(1), 10.5, 0.25, b"\x01result", None)
    writer.ended(_run(2), 11.0, 0.5, None, {"type": "ValueError", "message": "no"})
    writer.close()
    other = journal.JournalWriter(str(tmp_path), "k2")
    other.ended(_run(3), 12.0, 0.1, None, None)
    other.close()
    ended = journal.collect(tmp_path, "k1", _dead)
    assert [e.job for e in ended] == [("t", "j1", "lock1", 5, False), ("t", "j2", "lock2", 5, False)]
    assert (ended[0].attempt, ended[0].max_attempts, ended[0].started, ended[0].seconds) == (2, 3, 10.5, 0.25)
    assert ended[0].result == b"\x01result" and ended[1].error == {"type": "ValueError", "message": "no"}
    assert [p.name for p in tmp_path.iterdir()] == [f"jr-k2-{os.getpid()}-1"], "only the other host's is left"
    assert journal.collect(tmp_path, "k1", _dead) == []


def test_a_run_a_drain_stopped_is_marked_and_older_records_read_as_not(tmp_path):
    """``released``: the successor puts such a stopped run back uncounted;
    a record of the 12 fields written before the mark reads as not released."""
    import msgpack

    writer = journal.JournalWriter(str(tmp_path), "k")
    writer.ended(_run(1), 1.0, 0.1, None, {"type": "JobStopping", "stopped": True}, released=True)
    writer.ended(_run(2), 1.0, 0.1, None, None)
    writer.close()
    older = msgpack.packb(["t", "j3", "l3", None, False, 1, 3, 1.0, 0.1, None, None, False])
    with open(next(tmp_path.iterdir()), "ab") as f:
        f.write(len(older).to_bytes(4, "little") + older)
    ended = journal.collect(tmp_path, "k", _dead)
    assert [(e.job[1], e.released) for e in ended] == [("j1", True), ("j2", False), ("j3", False)]


def test_the_journal_of_a_live_worker_is_left_alone(tmp_path):
    writer = journal.JournalWriter(str(tmp_path), "k")
    writer.ended(_run(1), 1.0, 0.1, None, None)
    assert journal.collect(tmp_path, "k", lambda pid: pid == os.getpid()) == []
    assert len(journal.collect(tmp_path, "k", _dead)) == 1


def test_a_record_cut_short_or_unreadable_is_skipped(tmp_path):
    writer = journal.JournalWriter(str(tmp_path), "k")
    writer.ended(_run(1), 1.0, 0.1, None, None)
    writer.ended(_run(2), 1.0, 0.1, None, None)
    writer.close()
    [path] = tmp_path.iterdir()
    data = path.read_bytes()
    first = int.from_bytes(data[:4], "little") + 4
    garbage = (3).to_bytes(4, "little") + b"\xc1\xc1\xc1"  # 0xc1: never valid msgpack
    path.write_bytes(data[:first] + garbage + data[first:-3])  # the last record cut short
    assert [e.job[1] for e in journal.collect(tmp_path, "k", _dead)] == ["j1"]


def test_a_record_of_the_wrong_shape_is_skipped(tmp_path):
    """A journal is this host's own file, but a record that does not read as
    one (a type that is not text, a time that is not a number) must never
    stop its reader: the dispatcher's successor reads it at its start."""
    import msgpack

    good = [("t", "j1", "l1", None, False), 1, 3, 1.0, 0.1, None, None, False]
    bad = [
        [["t"], "j1", "l1", None, False, 1, 3, 1.0, 0.1, None, None, False],
        ["t", "j1", "l1", "soon", False, 1, 3, 1.0, 0.1, None, None, False],
        ["t", "j1", "l1", None, False, 1, 3, "x", 0.1, None, None, False],
        ["t", "j1", "l1", None, False, 1, 3, 1.0, float("inf"), None, None, False],
        ["t", "j1", "l1", None, False, 1, 3, 1.0, 0.1, "result", None, False],
    ]
    records = [[*good[0], *good[1:]], *bad]
    path = tmp_path / f"jr-k-{2**22 + 1}-1"
    path.write_bytes(b"".join(len(p).to_bytes(4, "little") + p for p in map(msgpack.packb, records)))
    assert [e.job[1] for e in journal.collect(tmp_path, "k", _dead)] == ["j1"]


def test_a_journal_keeps_two_generations_each_of_enough_records_and_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(journal, "ROTATE_RECORDS", 5)
    monkeypatch.setattr(journal, "ROTATE_BYTES", 200)
    writer = journal.JournalWriter(str(tmp_path), "k")
    for n in range(60):
        writer.ended(_run(n), 1.0, 0.1, None, None)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2, names
    kept = [e.job[1] for e in journal.collect(tmp_path, "k", _dead)]
    assert len(kept) >= 5 and kept == [f"j{n}" for n in range(60 - len(kept), 60)], "the newest ends, in order"


def test_a_result_too_long_to_keep_is_marked_not_kept(tmp_path):
    writer = journal.JournalWriter(str(tmp_path), "k")
    writer.ended(_run(1), 1.0, 0.1, b"x" * (journal.RESULT_LIMIT + 1), None)
    writer.ended(_run(2), 1.0, 0.1, b"x" * journal.RESULT_LIMIT, None)
    writer.close()
    first, second = journal.collect(tmp_path, "k", _dead)
    assert (first.result, first.cut) == (None, True)
    assert (len(second.result), second.cut) == (journal.RESULT_LIMIT, False)


def test_dead_workers_journals_are_cleared_this_hosts_soon_and_others_later(tmp_path):
    for key in ("mine", "other"):
        writer = journal.JournalWriter(str(tmp_path), key)
        writer.ended(_run(1), 1.0, 0.1, None, None)
        writer.close()
    written = max(os.path.getmtime(p) for p in tmp_path.iterdir())
    assert journal.clear_old(tmp_path, "mine", lambda pid: True, written + 10**6) == 0, "a live writer's stay"
    assert journal.clear_old(tmp_path, "mine", _dead, written) == 0, "young ones stay"
    assert journal.clear_old(tmp_path, "mine", _dead, written + journal.GONE_AFTER + 1) == 1
    assert [p.name.split("-")[1] for p in tmp_path.iterdir()] == ["other"]
    assert journal.clear_old(tmp_path, "mine", _dead, written + journal.FORGET_AFTER + 1) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_stopped_host_removes_its_journals_only(tmp_path):
    for key in ("mine", "other"):
        journal.JournalWriter(str(tmp_path), key).ended(_run(1), 1.0, 0.1, None, None)
    journal.remove_host(tmp_path, "mine")
    assert [p.name.split("-")[1] for p in tmp_path.iterdir()] == ["other"]


def test_a_failed_write_loses_the_record_not_the_run(tmp_path, monkeypatch):
    """A full disk (injected: the runtime directory is a tmpfs here)."""
    writer = journal.JournalWriter(str(tmp_path), "k")

    def refuse(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal.os, "write", refuse)
    writer.ended(_run(1), 1.0, 0.1, None, None)  # no exception
