"""The command pipe from a dispatcher to a worker: commands arrive whole and
in the order they were sent, wait in the pipe until the worker opens it,
a full pipe gives up instead of blocking the dispatcher, and a gone
dispatcher reads as the end. Real pipes, real processes."""

from __future__ import annotations

import os
import time

from actors.workers import channel
from actors.workers.commands import CommandPipe, CommandReader
from actors.workers.protocol import Release, RunJob, RunJobs, StopJob, TakeBack
from fdblayer.jobs.job import Job


def _runs(n: int, data: bytes = b"\x80") -> RunJobs:
    job = Job("t", "a" * 32, "b" * 32, 0)
    return RunJobs(tuple(RunJob(i, job, data, 1, 3, "mod:fn") for i in range(n)), "sqlite:///x", "/tmp/ch", 7)


def test_commands_sent_before_the_worker_opens_arrive_in_order(tmp_path):
    pipe = CommandPipe(tmp_path, "cmd1")
    try:
        sent = [_runs(2), StopJob(1), TakeBack(), StopJob(0, cancel=True), Release()]
        for msg in sent:
            assert pipe.send(msg)
        reader = CommandReader(str(pipe.path))  # opened after the writes: they waited in the pipe
        try:
            got = reader.read()
            assert [type(m) for m in got] == [RunJobs, StopJob, TakeBack, StopJob, Release]
            assert got[0].runs[1].token == 1 and got[0].channel == "/tmp/ch" and got[0].async_limit == 7
            assert got[1] == StopJob(1) and got[3] == StopJob(0, cancel=True)
            assert reader.read() == [] and not reader.ended  # nothing twice; the dispatcher still writes
        finally:
            reader.close()
    finally:
        pipe.close()


def test_a_command_split_across_reads_arrives_whole(tmp_path):
    pipe = CommandPipe(tmp_path, "cmd2")
    reader = CommandReader(str(pipe.path))
    try:
        assert pipe.send(_runs(1000, b"x" * 200))  # far more than one atomic pipe write
        os.write(pipe.write_end, b"\x05\x00")  # the first half of the next frame's length
        (big,) = reader.read()
        assert len(big.runs) == 1000 and big.runs[999].data == b"x" * 200
        assert reader.read() == []  # the partial frame waits for its rest
    finally:
        reader.close()
        pipe.close()


def test_a_full_pipe_gives_up_within_the_wait_instead_of_blocking(tmp_path):
    pipe = CommandPipe(tmp_path, "cmd3")  # nobody reads it
    try:
        blob = StopJob(0)
        t0 = time.monotonic()
        sent = 0
        while pipe.send(_runs(200, b"y" * 500), wait=0.05):
            sent += 1
            assert sent < 10_000, "the pipe never filled"
        assert time.monotonic() - t0 < 30
        assert sent > 0
        pipe.close()
        assert not pipe.send(blob)  # closed: refused at once
    finally:
        pipe.close()


def test_the_worker_sees_the_end_once_the_dispatcher_is_gone(tmp_path):
    pipe = CommandPipe(tmp_path, "cmd4")
    reader = CommandReader(str(pipe.path))
    try:
        assert pipe.send(TakeBack())
        pid = os.fork()
        if pid == 0:  # a forked process's copies of the ends close when it exits: no end for the worker
            os._exit(0)
        os.waitpid(pid, 0)
        assert reader.read() == [TakeBack()] and not reader.ended
        pipe.close()  # the dispatcher's ends (its writer and the reader it keeps) are gone
        assert reader.read() == [] and reader.ended
        assert not os.path.exists(pipe.path)
    finally:
        reader.close()


def test_names_are_those_clear_stale_removes_once_their_maker_is_gone(tmp_path):
    pipe = CommandPipe(tmp_path, "cmd5")
    try:
        assert pipe.path.name.startswith(channel.stale_prefix())
        assert channel.clear_stale(tmp_path) == 0  # its maker (this process) lives
        pipe.unlink()
        assert not os.path.exists(pipe.path)
        assert pipe.send(StopJob(3))  # the open ends outlive the name
    finally:
        pipe.close()


def _reads(pid: int, path: str) -> bool:
    """Whether process ``pid`` holds ``path`` open."""
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(f"{fds}/{fd}") == path:
                return True
        except OSError:
            pass
    return False


def test_a_worker_told_of_a_pipe_already_removed_waits_for_the_next(tmp_path):
    """A host stopped while its dispatcher adopted a worker: the dispatcher
    removed the pipe it had named in ``UsePipe`` before the worker opened
    it. The worker logs that and keeps waiting (no crash, no restart), and
    reads the next pipe it is given. A real node; the worker a real actor."""
    from supervision import ChildSpec, start_node
    from supervision.testing import free_port
    from tests.procs import wait_until

    from actors.workers.protocol import UsePipe
    from actors.workers.worker import Worker

    log_path = tmp_path / "node.log"
    config = {
        "version": 1,
        "formatters": {"line": {"format": "%(levelname)s %(message)s"}},
        "handlers": {"f": {"class": "logging.FileHandler", "filename": str(log_path), "formatter": "line"}},
        "root": {"handlers": ["f"], "level": "INFO"},
    }
    flags = {"strategy": "one_for_one", "intensity": 10, "period": 10}
    node = start_node(free_port(), flags, [ChildSpec("w", Worker, None, name="w")], log_config=config, timeout=20)
    pipe = CommandPipe(tmp_path, "cmd1")
    try:
        client = node.client()
        pid = client.get_pid("w", 5)
        client.send("w", UsePipe(str(tmp_path / "cmd-gone")))
        wait_until(lambda: "worker_pipe_gone" in log_path.read_text(), 10, "the gone pipe logged")
        client.send("w", UsePipe(str(pipe.path)))
        wait_until(lambda: _reads(pid, str(pipe.path)), 10, "the worker reading the next pipe")
        assert client.get_pid("w", 5) == pid  # never restarted
        text = log_path.read_text()
        assert "crash" not in text and "child_exited" not in text, text
    finally:
        pipe.close()
        node.stop()
