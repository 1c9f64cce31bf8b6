"""A running node whose store fills up or turns read-only under it.

``tests/fdblayer`` checks the errors themselves on one handle (a page
limit for DiskFull, ``?mode=ro`` for ReadOnlyStore). Here the whole
system meets them: a real node with permanent jobs running, its file on a
small ext4 file system (a loop device) that fills up (the OS says ENOSPC),
then made immutable (``chattr +i``: every write fails, even on descriptors
already open).
What must hold: API calls fail at once with a named error that names the
store; the node logs the error and either keeps answering or exits with
status 1 leaving nothing behind (never hangs); once space or write access
is back it works again (restarted if it had exited), nothing committed
is lost and the file passes ``PRAGMA integrity_check``.

These need root (mkfs.ext4, mount -o loop, chattr); elsewhere they are
skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fdblayer
from actors import docs, jobs
from fdblayer.exceptions import DiskFull, StoreError

from . import checks
from .chaos import HANDLER
from .nodes import ROOT, CliNode
from tests.procs import free_port, group_pids, pid_alive, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

T = "exhaust"
CONFIG = (
    "[couch_jobs]\ntype_check_period_msec = 500\ntype_check_max_jitter_msec = 100\n"
    "activity_monitor_max_jitter_msec = 50\n[replicator]\nmax_jobs = 2\ninterval = 1000\n"
    "doc_owner_timeout = 1\n"
)
N_DOCS = 2
CALL_LIMIT = 10.0  # seconds an API call may take when the store cannot be written


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


@contextlib.contextmanager
def small_disk(path: Path, megabytes: int):
    """A small ext4 file system (a loop device) mounted at ``path``: it fills
    up for real (ENOSPC) and supports ``chattr +i``."""
    image = path.with_suffix(".img")
    with open(image, "wb") as f:
        f.truncate(megabytes << 20)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 file system: {made.stderr.strip()}")
    path.mkdir(parents=True, exist_ok=True)
    done = _run("mount", "-o", "loop", str(image), str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a loop device (needs root): {done.stderr.strip()}")
    try:
        yield path
    finally:
        if _run("umount", str(path)).returncode != 0:
            _run("umount", "-l", str(path))
        image.unlink()


def immutable(paths: list[Path], on: bool) -> bool:
    """``chattr +i`` (every write fails, even on open descriptors) or ``-i``;
    False if the file system or the user cannot."""
    done = _run("chattr", "+i" if on else "-i", *map(str, paths))
    if done.returncode != 0 and not on:
        raise AssertionError(done.stderr)
    return done.returncode == 0


def integrity(path: Path) -> list:
    raw = sqlite3.connect(str(path))
    try:
        return raw.execute("PRAGMA integrity_check").fetchall()
    finally:
        raw.close()


class System:
    """A node with N_DOCS permanent jobs running on ``store``, and its baseline tree."""

    def __init__(self, store: Path, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.url = f"sqlite:///{store}"
        self.db = fdblayer.open(self.url)
        jobs.set_type_timeout(self.db, T, 1)
        for i in range(N_DOCS):
            docs.put(
                self.db,
                "_replicator",
                f"doc{i}",
                {"handler": HANDLER, "continuous": True, "options": {"log": str(workdir / "handlers.log")}},
            )
        self.node = CliNode(self.url, free_port(), workdir, CONFIG)
        try:
            self.node.start()
            self.n_types = len(jobs.get_types(self.db))
            self.baseline = wait_until(
                lambda: checks.complete_snapshot(self.node, self.n_types),
                60,
                "the node's tree",
                step=0.1,
                ignore=(Exception,),
            )
            self.names = checks.registered_names(self.node.client, self.baseline)
            self.wait_docs_running()
        except BaseException:
            self.node.cleanup()
            self.db.close()
            raise

    def wait_docs_running(self) -> None:
        from actors.scheduler.client import SchedulerClient

        def running() -> bool:
            table = SchedulerClient(self.node.client).jobs()
            return sum(1 for j in table if j["pid"] not in (None, "<starting>")) == N_DOCS

        wait_until(running, 60, "the permanent jobs to run", step=0.2, ignore=(Exception,))

    def outlive(self, seconds: float) -> str:
        """Watch the node for ``seconds``: it must answer every call in time, or
        exit with status 1 leaving nothing. Returns "alive" or "exited"."""
        until = time.monotonic() + seconds
        while True:
            if self.node.proc.poll() is not None or not pid_alive(self.node.info["pid"]):
                self.node.wait_down(expect_status=1)  # the node supervisor gave up: a clean exit
                return "exited"
            if time.monotonic() > until:
                return "alive"
            for limit in (2.0, CALL_LIMIT):  # a short probe first: a call to a dying node just times out
                try:
                    self.node.client.which_children(self.node.client.node, timeout=limit)
                    break
                except Exception:  # noqa: BLE001 - going down (noproc) or hanging (timeout): which one?
                    if self.node.proc.poll() is not None or not pid_alive(self.node.info["pid"]):
                        break
            else:
                raise AssertionError(f"the node neither answers nor exits\n{self.node.log_tail()}")
            time.sleep(0.2)

    def recover(self, outcome: str, job_id: str = "after") -> None:
        """Back to work: restarted if it had exited; whole; the queue and the jobs run."""
        if outcome == "exited":
            self.node.start()
        checks.wait_whole(self.node, self.baseline, self.names, self.n_types, 60, "the store came back")
        self.wait_docs_running()
        jobs.add(self.db, T, job_id, {"n": 1})
        job, data = jobs.accept(self.db, T, timeout=10)
        assert (job.id, data) == (job_id, {"n": 1})
        jobs.finish(self.db, job, {"n": 2})
        assert jobs.get_job_data(self.db, T, job_id) == {"n": 2}

    def close(self) -> None:
        try:
            self.node.stop()
            assert not any(group_pids(g) for g in self.node.pgids)
        finally:
            self.node.cleanup()
            self.db.close()


def _timed_add(db, job_id: str, data: dict) -> None:
    started = time.monotonic()
    try:
        jobs.add(db, T, job_id, data)
    finally:
        took = time.monotonic() - started
        assert took < CALL_LIMIT, f"add took {took:.1f}s"


def test_running_node_on_a_full_disk_then_a_read_only_store_fails_clearly_and_works_again(tmp_path):
    with small_disk(tmp_path / "fs", 12) as fs:
        reserve = fs / "reserve"
        reserve.write_bytes(b"\0" * (5 << 20))  # given back later, so SQLite can checkpoint its WAL
        store = fs / "store.db"
        system = System(store, tmp_path / "node")
        try:
            committed = disk_full(system, fs, reserve)
            read_only(system, store, committed)
        finally:
            system.close()
        assert integrity(store) == [("ok",)]


def disk_full(system: System, fs: Path, reserve: Path) -> list[str]:
    """Fill the disk under the node; give the space back. The ids committed."""
    phase = time.monotonic()
    committed: list[str] = []
    with pytest.raises(DiskFull) as full:
        for n in range(10_000):
            _timed_add(system.db, f"big{n}", {"blob": "x" * 50_000})
            committed.append(f"big{n}")
    assert str(fs / "store.db") in str(full.value) and "full" in str(full.value), full.value
    assert committed, "nothing fitted before the disk was full"
    fd = os.open(fs / "crumbs", os.O_WRONLY | os.O_CREAT)  # the last bytes too
    with contextlib.suppress(OSError):
        while True:
            os.write(fd, b"\0" * 4096)
    os.close(fd)
    with pytest.raises(DiskFull):  # once the room the failed add left in the WAL is used up
        for n in range(1000):
            _timed_add(system.db, f"small{n}", {"n": n})
            committed.append(f"small{n}")
    outcome = system.outlive(6.0)
    watched, phase = time.monotonic() - phase, time.monotonic()
    assert "DiskFull('store" in system.node.log_path.read_text(), "the node did not log the full disk"
    reserve.unlink()
    (fs / "crumbs").unlink()
    system.recover(outcome)
    stored = {i.id: i.data for i in jobs.get_jobs(system.db, T)}
    assert sorted(set(stored) - {"after"}) == sorted(committed), "a committed job was lost"
    assert all(stored[j] == {"blob": "x" * 50_000} for j in committed if j.startswith("big"))
    print(
        f"\ndisk full: {len(committed)} jobs fitted; node {outcome} ({watched:.1f}s), "
        f"working again {time.monotonic() - phase:.1f}s after the space came back"
    )
    return committed


def read_only(system: System, store: Path, committed: list[str]) -> None:
    """Make the store's files immutable under the node; then writable again."""
    files = [store, store.with_name(store.name + "-wal")]
    if not immutable(files, True):
        print("\nread-only store: not run (chattr +i is not supported here)")
        return
    phase = time.monotonic()
    try:
        with pytest.raises(StoreError) as refused:
            _timed_add(system.db, "refused", {"n": 1})
        assert str(store) in str(refused.value), refused.value
        assert jobs.get_job_data(system.db, T, committed[0]) == {"blob": "x" * 50_000}, "reads go on"
        log_from = len(system.node.log_path.read_text())
        outcome = system.outlive(6.0)
        watched = time.monotonic() - phase
        log = system.node.log_path.read_text()[log_from:]
        assert f"store {store}" in log and ("ReadOnlyStore" in log or "StoreUnavailable" in log), (
            "the node did not log the read-only store"
        )
    finally:
        immutable(files, False)
    phase = time.monotonic()
    system.recover(outcome, "after2")
    stored = {i.id for i in jobs.get_jobs(system.db, T)}
    assert set(committed) <= stored and "refused" not in stored
    print(
        f"read-only store: node {outcome} ({watched:.1f}s), working again "
        f"{time.monotonic() - phase:.1f}s after it was writable"
    )


def test_node_refuses_to_start_on_a_read_only_store_with_a_clear_error(tmp_path):
    store = tmp_path / "store.db"
    db = fdblayer.open(f"sqlite:///{store}")
    jobs.set_type_timeout(db, T, 1)
    db.close()
    if not immutable([store], True):
        pytest.skip("cannot make a file immutable (chattr +i needs root and ext4, xfs or btrfs)")
    try:
        env = dict(os.environ, PYTHONPATH=str(ROOT), OTPJOBS_RUNTIME_DIR=str(tmp_path))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "actors",
                "node",
                "start",
                "--store",
                f"sqlite:///{store}",
                "--port",
                str(free_port()),
                "--http-port",
                "0",
            ],
            cwd=str(ROOT),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        immutable([store], False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"store {store}: cannot write" in done.stderr, done.stderr
    assert not list(tmp_path.glob("node-*.json")), "no node was left running"
    assert integrity(store) == [("ok",)]
