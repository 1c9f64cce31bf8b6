"""The report channel: what a worker wrote outlives it, records arrive whole
and in order, names do not outlive their use. Real pipes, real processes."""

from __future__ import annotations

import os
import signal
import struct
import time

from actors.workers import channel
from actors.workers.channel import Channel, Writer


def _child(fn) -> int:  # noqa: ANN001
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    return pid


def test_records_of_a_killed_writer_are_all_read_in_order(tmp_path):
    ch = Channel(tmp_path, "1")
    try:

        def work() -> None:
            w = Writer(str(ch.path))
            w.start(1, 100.0)
            w.end(1, 0.5, b"result", None)
            w.start(2, 101.0)
            os.kill(os.getpid(), signal.SIGKILL)  # dies in its handler: run 2 started, never ended

        pid = _child(work)
        os.waitpid(pid, 0)
        records = ch.read()
        assert [(r.kind, r.token) for r in records] == [(channel.START, 1), (channel.END, 1), (channel.START, 2)]
        assert records[1].value == (0.5, b"result", None) and records[2].value == 101.0
        assert ch.read() == []  # nothing twice, and no end-of-file though the writer is gone
    finally:
        ch.close()


def test_a_record_split_across_reads_arrives_whole(tmp_path):
    ch = Channel(tmp_path, "2")
    try:
        w = Writer(str(ch.path))
        w.released((7, 8, 9))
        raw = os.read(ch.fd, 1 << 16)
        fd = w._fd  # noqa: SLF001 - write the record's bytes in two parts
        os.write(fd, raw[:5])
        assert ch.read() == []
        os.write(fd, raw[5:])
        (record,) = ch.read()
        assert record.kind == channel.RELEASED and record.value == (7, 8, 9)
        w.end(3, 0.1, None, {"type": "ValueError", "message": "bad", "traceback": ""})
        (record,) = ch.read()
        assert record.value[2]["message"] == "bad"
    finally:
        ch.close()


def test_an_unreadable_record_is_skipped_and_the_next_one_read(tmp_path):
    ch = Channel(tmp_path, "3")
    try:
        w = Writer(str(ch.path))
        os.write(w._fd, struct.pack("<BqI", ord("E"), 1, 3) + b"\xc1\xc1\xc1")  # noqa: SLF001 - not msgpack
        os.write(w._fd, struct.pack("<BqI", ord("?"), 2, 0))  # noqa: SLF001 - an unknown kind
        w.start(4, 1.0)
        assert [(r.kind, r.token) for r in ch.read()] == [(channel.START, 4)]
    finally:
        ch.close()


def test_the_name_goes_once_the_worker_writes_and_stale_names_are_cleared(tmp_path):
    ch = Channel(tmp_path, "4")
    try:
        assert ch.path.exists() and (ch.path.stat().st_mode & 0o777) == 0o600
        Writer(str(ch.path)).start(1, 1.0)
        ch.read()
        assert not ch.path.exists()
    finally:
        ch.close()
    pid = _child(lambda: None)
    os.waitpid(pid, 0)
    stale = tmp_path / f"ch-{pid}-1"
    os.mkfifo(stale)
    mine = Channel(tmp_path, "5")  # this process is alive: its name stays
    try:
        assert channel.clear_stale(tmp_path) == 1
        assert not stale.exists() and mine.path.exists()
    finally:
        mine.close()


def test_a_writer_whose_dispatcher_is_gone_drops_records_without_raising(tmp_path):
    """A start is recorded while the dispatcher reads; once it is gone the
    records are dropped, and a dropped start says so (its run must not start)."""
    ch = Channel(tmp_path, "6")
    w = Writer(str(ch.path))
    assert w.start(1, 1.0) is True
    ch.close()
    assert w.start(2, 1.0) is False
    w.end(2, 0.1, None, None)
    assert w.broken
    assert w.start(3, 1.0) is False
    missing = Writer(str(tmp_path / "missing"))
    assert missing.broken and missing.start(1, 1.0) is False


def test_a_writer_of_a_pipe_nobody_reads_is_broken_at_once(tmp_path):
    """A worker handed runs by a dispatcher that died since: opening its
    channel is refused (it would otherwise wait for a reader for ever)."""
    path = tmp_path / "ch-orphan"
    os.mkfifo(path, 0o600)
    pid = os.fork()
    if pid == 0:  # a child, so that a blocking open cannot hang the test run
        w = Writer(str(path))
        os._exit(0 if w.broken and not w.start(1, 1.0) else 3)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("opening a pipe nobody reads blocked")
