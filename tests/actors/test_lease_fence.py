"""A document job's lease fence (actors.scheduler.fence): past the deadline
its doc processor last set, the job is stopping, whatever else happens (its
node paused, its doc processor stuck), and a wait returns at the deadline."""

from __future__ import annotations

import queue
import threading
import time

from actors.scheduler.core import JobSpec
from actors.scheduler.fence import LeaseFence
from actors.handlers import JobContext, StopSignal
from actors.scheduler.job import scheduler_context


def context(fence: LeaseFence, db_name: str | None = "db") -> JobContext:
    spec = JobSpec("j", handler="m:f", db_name=db_name)
    return scheduler_context(spec, None, queue.Queue(), StopSignal(), fence)


def test_no_file_means_no_deadline(tmp_path):
    fence = LeaseFence(str(tmp_path / "fence"))
    assert fence.left() == float("inf")
    assert not context(fence).stopping


def test_a_wait_returns_true_at_the_deadline_and_the_job_is_stopping(tmp_path):
    writer, reader = LeaseFence(str(tmp_path / "fence")), LeaseFence(str(tmp_path / "fence"))
    writer.set(time.monotonic() + 0.2)
    ctx = context(reader)
    assert not ctx.stopping
    t0 = time.monotonic()
    assert ctx.wait(5.0) is True
    assert 0.15 < time.monotonic() - t0 < 1.5
    assert ctx.stopping and ctx.fenced


def test_a_deadline_moved_later_keeps_the_job_running(tmp_path):
    writer, reader = LeaseFence(str(tmp_path / "fence")), LeaseFence(str(tmp_path / "fence"))
    writer.set(time.monotonic() + 0.2)
    ctx = context(reader)
    threading.Timer(0.1, lambda: writer.set(time.monotonic() + 60)).start()
    assert ctx.wait(0.5) is False, "renewed in time: the whole wait ran"
    assert not ctx.stopping


def test_a_job_without_a_document_is_never_fenced(tmp_path):
    fence = LeaseFence(str(tmp_path / "fence"))
    fence.set(time.monotonic() - 1)
    assert context(fence, db_name=None).stopping is False
    assert context(fence).stopping is True


def test_a_symlink_planted_as_the_fence_file_is_never_followed(tmp_path):
    import pytest

    from supervision import RuntimeDirError

    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    (tmp_path / "fence").symlink_to(target)
    writer, reader = LeaseFence(str(tmp_path / "fence")), LeaseFence(str(tmp_path / "fence"))
    with pytest.raises(RuntimeDirError):
        writer.set(time.monotonic() + 10)
    assert reader.left() == float("inf"), "not read through the link"
    assert target.read_bytes() == b"keep me"
    (tmp_path / "fence").unlink()
    (tmp_path / "fence").symlink_to(tmp_path / "absent")  # dangling: creating it must not create the target
    with pytest.raises(RuntimeDirError):
        writer.set(time.monotonic() + 10)
    assert not (tmp_path / "absent").exists()
